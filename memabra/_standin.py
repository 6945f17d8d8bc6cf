"""An offline stand-in chat model: deterministic, extractive, honest about being a stand-in.

It answers only from what was injected into its context, the way a real model would use (or
ignore) it:

* an injected memory is used when it relates to the question: a shared content word, or a word
  pair from ``associations`` (the world knowledge a real LLM brings, e.g. "dinner" relates to
  "vegetarian"); unrelated memories are ignored;
* with tools bound, the first call asks for the bound tool that best matches the question,
  passing the question and the memories it used as the tool's first required parameter (the
  demo's tools call it ``request``; a tool without parameters gets none); the tool's reply is quoted;
* when no bound tool matches and ``find_tools`` is bound, it searches for one with the words it
  relates to the question (as a real model would phrase "set a timer"), then calls what it found;
* an injected skill whose description relates to the question is followed (its first line,
  its ``Marker:`` if it has one, is appended).

It exists so ``memabra demo`` and the tests run without a network or an API key; swap in a real
model with ``--model provider:name``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from memabra._text import content_words

__all__ = ["ExtractiveChatModel"]

_MEMORY_LINE = re.compile(r"^- (.+)$", re.MULTILINE)
_SKILL = re.compile(r"^Skill '([^']+)' \((.*)\):\n(.*?)(?=\n\nSkill '|\Z)", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"Marker:\s*(.+)")
_FIND_TOOLS = "find_tools"


class ExtractiveChatModel(BaseChatModel):
    """See the module docstring. ``associations`` lists groups of words that relate to each other."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    associations: list[frozenset[str]] = Field(default_factory=list)
    bound_tools: list[dict[str, str]] = Field(default_factory=list)
    model_name: str = "memabra-extractive-standin"

    @property
    def _llm_type(self) -> str:
        return "memabra-extractive-standin"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ExtractiveChatModel:
        described = [{"name": t.name, "description": t.description, "argument": _argument(t)} for t in tools]
        return ExtractiveChatModel(associations=self.associations, bound_tools=described, model_name=self.model_name)

    # ------------------------------------------------------------------ relatedness
    def _expand(self, words: Iterable[str]) -> set[str]:
        out = set(words)
        for group in self.associations:
            if out & group:
                out |= group
        return out

    def _relates(self, text: str, query_words: set[str]) -> bool:
        return bool(content_words(text) & query_words)

    # ------------------------------------------------------------------ generation
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        system = "\n".join(str(m.content) for m in messages if isinstance(m, SystemMessage))
        question = next((str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        since_question = (
            messages[[i for i, m in enumerate(messages) if isinstance(m, HumanMessage)][-1] + 1 :] if question else []
        )
        searched = any(isinstance(m, ToolMessage) and m.name == _FIND_TOOLS for m in since_question)
        tool_replies = [m for m in since_question if isinstance(m, ToolMessage) and m.name != _FIND_TOOLS]
        query_words = self._expand(content_words(question))
        memory_block = (
            system.split("What you know about the user:", 1)[1] if "What you know about the user:" in system else ""
        )
        memory_block = memory_block.split("\n\nSkill '", 1)[0]
        memories = [m for m in _MEMORY_LINE.findall(memory_block) if self._relates(m, query_words)]

        if self.bound_tools and not tool_replies:
            tool = self._pick_tool(query_words)
            if tool is None and not searched and any(t["name"] == _FIND_TOOLS for t in self.bound_tools):
                wanted = " ".join(sorted(query_words - content_words(question))) or question
                call = {
                    "name": _FIND_TOOLS,
                    "args": {"query": wanted},
                    "id": f"call-{zlib.crc32(f'find|{question}'.encode()):08x}",
                }
                return self._reply(AIMessage("", tool_calls=[call]), messages)
            if tool is not None:
                request = " ".join([question, *memories])
                argument = next(t.get("argument", "request") for t in self.bound_tools if t["name"] == tool)
                call = {
                    "name": tool,
                    "args": {argument: request} if argument else {},
                    "id": f"call-{zlib.crc32(f'{tool}|{question}'.encode()):08x}",
                }
                return self._reply(AIMessage("", tool_calls=[call]), messages)

        parts = [f"{m}." for m in memories]
        parts += [str(t.content) + "." for t in tool_replies]
        for name, description, body in _SKILL.findall(system):
            if self._relates(f"{name} {description}", query_words):
                marker = _MARKER.search(body)
                parts.append(marker.group(1).strip() if marker else body.strip().splitlines()[0])
        answer = " ".join(parts) if parts else "I don't know enough about you to answer that yet."
        return self._reply(AIMessage(answer), messages)

    def _pick_tool(self, query_words: set[str]) -> str | None:
        best, best_score = None, 0
        for tool in self.bound_tools:
            if tool["name"] == _FIND_TOOLS:
                continue
            score = len(content_words(f"{tool['name'].replace('_', ' ')} {tool['description']}") & query_words)
            if score > best_score:
                best, best_score = tool["name"], score
        return best

    @staticmethod
    def _reply(message: AIMessage, messages: Sequence[BaseMessage]) -> ChatResult:
        prompt_tokens = sum(len(str(m.content).split()) for m in messages)
        message.usage_metadata = {
            "input_tokens": prompt_tokens,
            "output_tokens": len(str(message.content).split()) + 8 * len(message.tool_calls),
            "total_tokens": prompt_tokens + len(str(message.content).split()),
        }
        return ChatResult(generations=[ChatGeneration(message=message)])


def _argument(tool: Any) -> str:
    """The parameter the stand-in puts its request in: the tool's first required one, else its
    first one; ``""`` for a tool that takes none (and ``request`` where the schema cannot be read)."""
    try:
        parameters = convert_to_openai_tool(tool)["function"].get("parameters", {})
    except Exception:  # noqa: BLE001 - a stand-in: an unreadable schema falls back to the demo's name
        return "request"
    names = [str(n) for n in parameters.get("properties", {})]
    required = [n for n in names if n in parameters.get("required", ())]
    return (required or names or [""])[0]


def associations_from(groups: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    return [frozenset(w.lower() for w in words) for words in groups.values()]
