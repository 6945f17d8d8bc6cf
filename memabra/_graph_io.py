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


# Where LangGraph's Agent Server puts the identity its custom auth handler returned for the request
# that created the run (langgraph_api sets it on every run's config).
AUTH_USER_KEY = "langgraph_auth_user_id"


def run_user_id(runtime: Runtime[Any] | None, config: RunnableConfig | None = None) -> str:
    """The user a run routes for: the run's ``context`` ``user_id``, else its config's
    ``configurable`` ``user_id``, else the identity LangGraph's Agent Server authenticated. Where
    the server authenticated someone, a ``user_id`` naming anyone else is refused: a client must
    not read another user's memories by naming them in its run's context (a backend acting for its
    users authenticates as each of them: its auth handler returns the end user's identity)."""
    ctx = runtime.context if runtime is not None else None
    user = (
        getattr(ctx, "user_id", None) if ctx is not None and not isinstance(ctx, dict) else (ctx or {}).get("user_id")
    )
    configurable = (config or {}).get("configurable") or {}
    if not user:  # the common LangGraph idiom: {"configurable": {"user_id": ...}}
        user = configurable.get("user_id")
    authenticated = configurable.get(AUTH_USER_KEY)  # None or "" for an unauthenticated request
    if authenticated:
        if user and str(user) != str(authenticated):
            raise InvalidRecordError(
                f"the run names user {str(user)!r} but the server authenticated {str(authenticated)!r}: memabra "
                "routes each authenticated user's runs on their own memories only (leave user_id out, or "
                "authenticate as that user)"
            )
        return str(authenticated)
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
