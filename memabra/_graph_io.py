"""What the agent, the middleware and the nodes read off LangGraph: message text, the run's user and
thread, a reply's token usage."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from memabra._errors import InvalidRecordError

__all__ = ["content_text", "message_text", "run_thread_id", "run_user_id", "token_usage"]


def content_text(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)


def message_text(message: AnyMessage) -> str:
    return content_text(message.content)


def run_user_id(runtime: Runtime[Any] | None, config: RunnableConfig | None = None) -> str:
    ctx = runtime.context if runtime is not None else None
    user = (
        getattr(ctx, "user_id", None) if ctx is not None and not isinstance(ctx, dict) else (ctx or {}).get("user_id")
    )
    if not user:  # the common LangGraph idiom: {"configurable": {"user_id": ...}}
        user = ((config or {}).get("configurable") or {}).get("user_id")
    if not user:
        raise InvalidRecordError(
            "memabra needs the user: invoke with context={'user_id': ...} or config={'configurable': {'user_id': ...}}"
        )
    return str(user)


def run_thread_id(config: RunnableConfig | None) -> str | None:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return str(thread) if thread is not None else None


def token_usage(message: AIMessage | None) -> tuple[int | None, int | None]:
    usage: dict[str, Any] = dict(message.usage_metadata or {}) if message is not None else {}
    return usage.get("input_tokens"), usage.get("output_tokens")
