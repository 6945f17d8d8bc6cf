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

:class:`ScriptedChatModel` is the other stand-in, for an application's own tests: it says what the
test scripted, in order, and records what each call was sent. LangChain's fake chat models cannot
take the place of a model with tools, as they do not implement ``bind_tools``.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from memabra._errors import ConfigError
from memabra._text import content_words

__all__ = ["ExtractiveChatModel", "ScriptedCall", "ScriptedChatModel"]

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


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One call a :class:`ScriptedChatModel` answered: the messages it was sent (memabra's injected
    memories and skills are in the system message, ``system``) and the names of the tools bound."""

    messages: tuple[BaseMessage, ...]
    tools: tuple[str, ...]

    @property
    def system(self) -> str:
        return "\n".join(str(m.content) for m in self.messages if isinstance(m, SystemMessage))


class _Script:
    """Shared by a model and its tool-bound copies, so the responses advance across them (the agent
    binds the turn's tools to a new copy at each call); locked, as ``batch`` calls from threads."""

    def __init__(self, responses: Sequence[AIMessage | str]) -> None:
        self.responses = list(responses)
        self.calls: list[ScriptedCall] = []
        self.lock = threading.Lock()

    def answer(self, messages: Sequence[BaseMessage], tools: tuple[str, ...]) -> AIMessage:
        with self.lock:
            n = len(self.calls)
            if n >= len(self.responses):
                # raised rather than repeating the last one: a turn that calls the model more often
                # than the test expects is what the test is there to catch
                raise ConfigError(
                    f"ScriptedChatModel got call {n + 1} but was given {len(self.responses)} responses"
                    f" (tools bound to this call: {list(tools)})"
                )
            self.calls.append(ScriptedCall(tuple(messages), tools))
            response = self.responses[n]
        if isinstance(response, str):
            return AIMessage(response)
        # a tool call needs an id for its ToolMessage to answer; a test need not invent one
        calls = [{**call, "id": call.get("id") or f"call-{n}-{i}"} for i, call in enumerate(response.tool_calls)]
        return response.model_copy(update={"tool_calls": calls})


class ScriptedChatModel(BaseChatModel):
    """A chat model for an application's tests: call *n* returns ``responses[n]`` (a string, or an
    ``AIMessage``, with ``tool_calls`` to call tools), whichever tools are bound; a call past the
    last response raises :class:`~memabra.ConfigError`. ``calls`` records each call's messages and
    bound tools, so a test can assert what memabra injected and which tools it bound."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    # Any, checked in __init__: pydantic would try each string as an AIMessage first, and langchain's
    # validator then fails with an AttributeError rather than a validation error
    responses: list[Any] = Field(default_factory=list)
    model_name: str = "memabra-scripted"
    _script: _Script = PrivateAttr()
    _tools: tuple[str, ...] = PrivateAttr(default=())

    def __init__(self, responses: Sequence[AIMessage | str] = (), **kwargs: Any) -> None:
        # checked here, not by a pydantic validator, which would wrap the ConfigError in its own error
        for response in responses:
            if not isinstance(response, str | AIMessage):
                raise ConfigError(f"ScriptedChatModel responses must be strings or AIMessages, got {response!r:.80}")
        # pydantic takes the fields as keywords; mypy reads only BaseChatModel's own signature
        super().__init__(responses=list(responses), **kwargs)  # type: ignore[call-arg]

    def model_post_init(self, context: Any) -> None:
        self._script = _Script(self.responses)

    @property
    def _llm_type(self) -> str:
        return "memabra-scripted"

    @property
    def calls(self) -> tuple[ScriptedCall, ...]:
        """The calls answered so far, by this model and every copy ``bind_tools`` made of it."""
        with self._script.lock:
            return tuple(self._script.calls)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        bound = ScriptedChatModel(responses=self.responses, model_name=self.model_name)
        bound._script = self._script
        bound._tools = tuple(convert_to_openai_tool(t)["function"]["name"] for t in tools)
        return bound

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._script.answer(messages, self._tools))])
