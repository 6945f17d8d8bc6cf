"""A scripted chat model for driving the graph in tests: replies in order, records what it saw."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

Reply = AIMessage | Callable[[list[BaseMessage], list[str]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Each call returns the next scripted reply (an AIMessage, or a function of the messages and
    the bound tool names). ``calls`` records (messages, bound tool names) per call."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    replies: list[Any] = Field(default_factory=list)
    bound: list[str] = Field(default_factory=list)
    script: Any = None

    def model_post_init(self, context: Any) -> None:
        if self.script is None:
            self.script = _Script(list(self.replies))

    @property
    def calls(self) -> list[tuple[list[BaseMessage], list[str]]]:
        return self.script.calls

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        names = [getattr(t, "name", None) or t["name"] for t in tools]
        return ScriptedChatModel(replies=self.replies, bound=names, script=self.script)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.script.calls.append((list(messages), list(self.bound)))
        reply = self.script.next()
        if callable(reply):
            reply = reply(list(messages), list(self.bound))
        reply = AIMessage(
            content=reply.content,
            tool_calls=reply.tool_calls,
            usage_metadata={
                "input_tokens": 10 * len(messages),
                "output_tokens": 5,
                "total_tokens": 10 * len(messages) + 5,
            },
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])


class _Script:
    """Shared by a model and its tool-bound copies, so replies advance across them."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.calls: list[tuple[list[BaseMessage], list[str]]] = []
        self.cursor = 0

    def next(self) -> Any:
        if not self.replies:
            return AIMessage("ok")
        reply = self.replies[min(self.cursor, len(self.replies) - 1)]
        self.cursor += 1
        return reply
