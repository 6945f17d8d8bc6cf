"""An HTTP route for end users' feedback: a chat UI's thumbs, stars and "that's wrong" reach the
episode's reward (:meth:`~memabra.MemabraAgent.feedback`) without an operator in between.

``feedback_app(agent)`` is a Starlette app serving ``POST /episodes/{episode_id}/feedback`` with a
JSON object of feedback keys; it answers the receipt as JSON. Name it as ``langgraph.json``'s
``http.app`` (with ``"enable_custom_route_auth": true``) or mount it in a FastAPI / Starlette app.
Needs Starlette: the ``admin`` extra, LangGraph's Agent Server and FastAPI each bring it.

The rules, in the order a request meets them (every refusal is JSON ``{"detail": ...}`` and stores
nothing):

* 405: a method other than POST.
* 401: no authenticated user (``user(request)`` gave ``None``). Never anonymous.
* 415: a body not declared ``application/json``: a cross-site form cannot send that type without
  a CORS preflight, so a cookie-authenticated app is not open to forged feedback.
* 413: a body over :data:`MAX_BODY_BYTES` (refused on its declared length, else while read).
* 400: a body that is not a JSON object, a key outside :data:`memabra.FEEDBACK_KEYS` or a value
  out of range (:class:`~memabra.FeedbackSignals`' message), a key an end user may not send
  (outside ``keys``), no signal at all, or a malformed ``Idempotency-Key`` header.
* 404: an episode unknown, or another user's: the same answer, so ids cannot be probed.
* 409: an ``Idempotency-Key`` already used on this episode with other values (the first stands).
* 503, ``Retry-After``: the log could not be reached (an outage, a failover); nothing or, where the
  connection was lost with the commit in flight, possibly the feedback was stored: a retry with
  the same ``Idempotency-Key`` is recorded at most once.

Feedback accumulates: each POST is one more feedback on the episode, the latest verdict wins and
corrections add up (:mod:`memabra._reward`). A UI that retries sends the same ``Idempotency-Key``
header: the retry is recorded once and answered ``"status": "duplicate"``.

A ``retract_memory`` ("that's wrong, forget it") is stored like any feedback, and retires the
memory only where it is the user's current memory (:mod:`memabra._retraction`). Every answer
carries ``"retired_memory"``: the memory retired, or ``null`` (no retraction, or an id that is unknown,
another user's, or retired or superseded since: the same answer for each, so ids cannot be
probed; the correction still counts in the reward).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy.exc import OperationalError

from memabra._errors import ConfigError, InvalidFeedbackError, UnknownEpisodeError
from memabra._feedback import same_feedback
from memabra._memabra_agent import MemabraAgent
from memabra._records import Feedback, FeedbackKind, FeedbackReceipt
from memabra._session import RoutingSession
from memabra._session_async import run_whole
from memabra._signals import FEEDBACK_KEYS, FeedbackSignals
from memabra.storage import DatabaseNotWritableError, DatabaseTimeoutError
from memabra.storage._timeouts import TIMEOUT_CAUSES

try:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "memabra.feedback_app needs Starlette: pip install 'memabra[admin]' "
        "(LangGraph's Agent Server and FastAPI install it too)"
    ) from exc

__all__ = ["END_USER_FEEDBACK_KEYS", "MAX_BODY_BYTES", "agent_server_user", "feedback_app"]

logger = logging.getLogger("memabra")

END_USER_FEEDBACK_KEYS: frozenset[str] = frozenset(
    {"correct", "misleading", "rating", "redo", "correction", "tool_wrong", "retract_memory", "comment"}
)
"""The feedback keys an end user may send by default: what a person says about an answer. Left
out: ``success`` (a raw reward value: the application's judgement, not a UI control),
``correction_severity`` (how much a correction weighs: the reward's tuning), ``gold_answer`` (a
labeller's reference answer, which MemPO trains on), the implicit keys (``used_ids``,
``relevant_ids``... what the runtime observed, which set the candidates' own outcomes),
``accepted`` (an automatic check's) and ``final`` (closes the feedback window: a later correction
would then count for nothing). The application posts those itself, with ``agent.feedback``."""

# What a 503 asks a client to wait before retrying: a failover or a restarted server takes seconds.
RETRY_AFTER_S = 5

# the admin's words for the same causes: an on-call person reading a client's 503 meets its terms
_TIMEOUTS = TIMEOUT_CAUSES


def _unavailable_detail(exc: OperationalError) -> str:
    """What a 503 says happened, and whether the feedback may have been stored. A retry under the
    same Idempotency-Key is right in every case: recorded at most once where it landed."""
    if isinstance(exc, DatabaseTimeoutError):
        what = exc.cause
        if exc.outcome_unknown:
            return f"the database cancelled a statement ({what}) during the commit: the feedback may have been stored"
        return f"the database cancelled a statement ({what}): the feedback was not stored (rolled back)"
    if isinstance(exc, DatabaseNotWritableError):
        return "the database refused a write (it is read-only, on a standby or out of space): the feedback was not stored (rolled back)"
    if not getattr(exc, "may_have_written", True):  # no connection opened: nothing was sent
        return "the episode log is unavailable (no connection could be opened): the feedback was not stored"
    # a write lost with its commit in flight may have landed
    return "the episode log is unavailable (a connection was refused or lost)"


# A correction of a few paragraphs fits with room to spare; a larger body is no chat UI's feedback.
MAX_BODY_BYTES = 16 * 1024

# The header a client retries under, as the IETF's Idempotency-Key draft names it.
IDEMPOTENCY_HEADER = "idempotency-key"
# A client's key: printable ASCII (a UUID, a ULID, a hash) of at most this length.
_MAX_CLIENT_KEY = 200
# The longest episode id the log stores: a longer one names no episode.
_MAX_EPISODE_ID = 200
_NOT_FOUND = "no such episode"
# The methods the route answers (all but POST with 405): HTTP's, as RFC 9110 and PATCH's RFC name them.
_EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]

UserOf = Callable[[Request], str | None | Awaitable[str | None]]
"""Who is asking: the request's user id, or ``None`` for nobody (401). Sync or async."""


def agent_server_user(request: Request) -> str | None:
    """The authenticated user's ``identity``, as LangGraph's Agent Server sets it on a custom
    route's request when ``langgraph.json`` has ``"http": {"enable_custom_route_auth": true}`` and an
    ``"auth"`` handler (Starlette's ``scope["user"]``, a ``ProxyUser``). ``None`` without one, or for
    the server's ``UnauthenticatedUser`` (no ``auth`` configured): such a request gets 401."""
    found = request.scope.get("user")
    if found is None or not getattr(found, "is_authenticated", False):
        return None
    identity = getattr(found, "identity", None)
    return identity if isinstance(identity, str) and identity else None


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Posted:
    """What the worker thread did: ``receipt`` None where no episode of this user has the id;
    ``conflict`` where the idempotency key was used before with other values."""

    receipt: FeedbackReceipt | None
    conflict: bool = False


def feedback_app(
    agent: MemabraAgent | RoutingSession,
    *,
    user: UserOf = agent_server_user,
    keys: Collection[str] = END_USER_FEEDBACK_KEYS,
    source: str = "http",
) -> Starlette:
    """A Starlette app serving ``POST /episodes/{episode_id}/feedback`` for ``agent``'s log (see
    the module's docstring for the rules). ``user``: who is asking (default
    :func:`agent_server_user`); a user rates only episodes logged under that user id. ``keys``: the
    feedback keys accepted (default :data:`END_USER_FEEDBACK_KEYS`). ``source``: stored with each
    feedback (the admin view's episode page and the CLI print it)."""
    if isinstance(agent, MemabraAgent):
        session = agent.session
    elif isinstance(agent, RoutingSession):
        session = agent
    else:
        raise TypeError(f"feedback_app takes a MemabraAgent or a RoutingSession, got {type(agent).__name__}")
    allowed = frozenset(keys)
    unknown = sorted(allowed - set(FEEDBACK_KEYS))
    if unknown:
        raise ConfigError(f"feedback_app keys names no feedback key: {', '.join(unknown)}")
    if not allowed:
        raise ConfigError("feedback_app keys is empty: no feedback could be accepted")

    async def post(request: Request) -> Response:
        if request.method != "POST":
            return _not_allowed()
        try:
            owner = await _user(user, request)
            if owner is None:
                raise _Refused(401, "authentication required")
            payload = _payload(await _body(request), allowed)
            key = _scoped_key(request, owner)
            episode_id = str(request.path_params["episode_id"])
            if len(episode_id) > _MAX_EPISODE_ID:
                raise _Refused(404, _NOT_FOUND)
        except _Refused as refused:
            logger.debug("feedback refused with %d: %s", refused.status, refused.detail)
            return JSONResponse({"detail": refused.detail}, status_code=refused.status)
        # The ownership read and the write run on a worker thread, awaited whole even where the
        # client goes away meanwhile (the pool is never closed under a write in flight).
        try:
            posted = await run_whole(partial(_post, session, owner, episode_id, payload, key, source))
        except OperationalError as exc:  # DatabaseUnavailableError included: an outage, a lost connection
            detail = _unavailable_detail(exc)
            logger.warning("feedback for episode %s not taken: %s: %s", episode_id, detail, exc)
            return JSONResponse(
                {"detail": f"{detail}; retry later with the same Idempotency-Key"},
                status_code=503,
                headers={"retry-after": str(RETRY_AFTER_S)},
            )
        if posted.receipt is None:
            return JSONResponse({"detail": _NOT_FOUND}, status_code=404)
        if posted.conflict:
            detail = "this Idempotency-Key was already used with other values: the first feedback stands"
            return JSONResponse({"detail": detail}, status_code=409)
        receipt = posted.receipt
        answer: dict[str, Any] = {
            "episode_id": episode_id,
            "feedback_id": receipt.feedback_id,
            "status": receipt.status,
            "applied": receipt.applied,
            # always present (null for none): one shape for every answer, whatever the body held
            "retired_memory": receipt.retired_memory,
        }
        return JSONResponse(answer)

    # Every method routed here, the 405 answered by the route itself: LangGraph's Agent Server lifts
    # an ``http.app``'s routes into its own, ahead of a mount taking every path, and a route that
    # matched POST only would let a GET fall through to that mount's 404 ("wrong URL" to a client).
    route = Route("/episodes/{episode_id}/feedback", post, methods=_EVERY_METHOD)
    return Starlette(routes=[route], exception_handlers={HTTPException: _http_error})


def _not_allowed() -> Response:
    return JSONResponse({"detail": "Method Not Allowed"}, status_code=405, headers={"allow": "POST"})


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (404 for another path; 405 for a method HTTP does not name, whose
    ``Allow`` would list every method the route is registered for) in the same JSON shape as this app's."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return _not_allowed()
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _user(user: UserOf, request: Request) -> str | None:
    found = user(request)
    if inspect.isawaitable(found):
        found = await found
    if found is not None and not isinstance(found, str):
        raise TypeError(f"feedback_app's user callable must return a user id (str) or None, got {found!r}")
    return found or None


async def _body(request: Request) -> bytes:
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise _Refused(415, "the body must be JSON, sent with Content-Type: application/json")
    too_large = f"the body is over {MAX_BODY_BYTES} bytes"
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _Refused(413, too_large)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise _Refused(413, too_large)
    return bytes(body)


def _payload(body: bytes, allowed: frozenset[str]) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested past the parser's depth
        raise _Refused(400, "the body is not valid JSON") from None
    # A key kept from end users is named as such before any value is read (``final: "yes"`` is
    # refused for its key, not its value); unknown keys and bad values get the parser's message.
    refused = [k for k in payload if k in FEEDBACK_KEYS and k not in allowed] if isinstance(payload, dict) else []
    if refused:
        raise _Refused(
            400,
            f"feedback key {', '.join(map(repr, refused))} is not one an end user may send; "
            f"accepted: {', '.join(sorted(allowed))}",
        )
    try:
        signals = FeedbackSignals.parse(payload)  # a JSON object, known keys, values in range
    except InvalidFeedbackError as exc:
        raise _Refused(400, str(exc)) from None
    if not signals.as_payload():
        raise _Refused(400, f"the feedback carries no signal; give at least one of {', '.join(sorted(allowed))}")
    return dict(payload)


def _scoped_key(request: Request, owner: str) -> str | None:
    """The stored idempotency key for the client's header, or ``None`` (a fresh one per POST).
    The log's keys are one namespace across episodes and sources, so the client's key is hashed
    with the user and the episode: nobody's key can collide with, or probe, another's."""
    client = request.headers.get(IDEMPOTENCY_HEADER)
    if client is None:
        return None
    if not 0 < len(client) <= _MAX_CLIENT_KEY or not all("!" <= c <= "~" for c in client):
        raise _Refused(400, f"Idempotency-Key must be 1 to {_MAX_CLIENT_KEY} printable ASCII characters")
    scope = "\x00".join((owner, str(request.path_params["episode_id"]), client))
    # surrogatepass: an identity holding a lone surrogate (a JWT's "\\udc80" decodes to one) owns no
    # episode (the log stores the id otherwise), so it gets the 404 below, not a UnicodeEncodeError
    return "http:" + hashlib.sha256(scope.encode("utf-8", "surrogatepass")).hexdigest()


def _post(
    session: RoutingSession,
    owner: str,
    episode_id: str,
    payload: Mapping[str, Any],
    key: str | None,
    source: str,
) -> _Posted:
    try:
        if session.log.get_episode(episode_id).user_id != owner:
            return _Posted(None)
        receipt = session.feedback(episode_id, source=source, idempotency_key=key, **payload)
    except UnknownEpisodeError:  # never logged, or erased before the write
        return _Posted(None)
    if receipt.status != "duplicate" or key is None:
        return _Posted(receipt)
    stored = session.log.feedback_for(episode_id, include_late=True)
    earlier = next((f for f in stored if f.id == receipt.feedback_id), None)
    now = Feedback(episode_id, FeedbackKind.EXPLICIT, source, payload, idempotency_key=key)
    return _Posted(receipt, conflict=earlier is not None and not same_feedback(earlier, now))
