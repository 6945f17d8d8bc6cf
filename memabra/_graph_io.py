"""What the agent, the middleware and the nodes read off LangGraph: message text, the run's user,
allowed tools and thread, a reply's token usage."""

from __future__ import annotations

import numbers
import uuid
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from memabra._errors import InvalidRecordError
from memabra._run_scope import allowed_tool_names

__all__ = ["content_text", "message_text", "run_allowed_tools", "run_thread_id", "run_user_id", "token_usage"]


def content_text(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)


def message_text(message: AnyMessage) -> str:
    return content_text(message.content)


# Where LangGraph's Agent Server puts the identity its custom auth handler returned for the request
# that created the run (langgraph_api sets it on every run's config).
AUTH_USER_KEY = "langgraph_auth_user_id"


def _context_field(runtime: Any, key: str) -> Any:
    """``key`` of a run's ``context``: a dict, or an object (``MemabraContext``, an app's own
    dataclass) read by attribute; ``None`` where it has none. ``runtime``: a node's ``Runtime`` or a
    tool call's ``ToolRuntime``."""
    ctx = getattr(runtime, "context", None)
    if ctx is None:
        return None
    return ctx.get(key) if isinstance(ctx, dict) else getattr(ctx, key, None)


def run_allowed_tools(runtime: Any) -> frozenset[str] | None:
    """The tools the run may use: its context's ``allowed_tools`` (``None``: every tool the agent
    has; empty: none). Read off the context only, never the config's ``configurable``, so the
    restriction has one place to be set; read again wherever a turn may be routed or given tools,
    as a run resumed in another worker routes there with no other memory of it."""
    return allowed_tool_names(_context_field(runtime, "allowed_tools"))


def run_user_id(runtime: Runtime[Any] | None, config: RunnableConfig | None = None) -> str:
    """The user a run routes for: the run's ``context`` ``user_id``, else its config's
    ``configurable`` ``user_id``, else the identity LangGraph's Agent Server authenticated. Where
    the server authenticated someone, a ``user_id`` naming anyone else is refused: a client must
    not read another user's memories by naming them in its run's context (a backend acting for its
    users authenticates as each of them: its auth handler returns the end user's identity)."""
    user = _user_text(_context_field(runtime, "user_id"), "context")
    configurable = (config or {}).get("configurable") or {}
    if not user:  # the common LangGraph idiom: {"configurable": {"user_id": ...}}
        user = _user_text(configurable.get("user_id"), "config's configurable")
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


def _user_text(value: object, where: str) -> str:
    """A run's ``user_id`` as the text memabra keys memories and episodes by: a string, an integer
    (``0`` included; a NumPy one too, as a DataFrame's id column gives it: its text is the int's)
    or a UUID; ``""`` for none given. Anything else is refused by type: its text (a dict's, an
    object's with its memory address) would name another user in every process."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    raise InvalidRecordError(
        f"the run's {where} user_id must be a string, an integer or a UUID, got {type(value).__name__}"
    )


def run_thread_id(config: RunnableConfig | None) -> str | None:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return str(thread) if thread is not None else None


def token_usage(message: AIMessage | None) -> tuple[int | None, int | None]:
    usage: dict[str, Any] = dict(message.usage_metadata or {}) if message is not None else {}
    return usage.get("input_tokens"), usage.get("output_tokens")
