"""The admin web app: review routing decisions, record feedback, promote or roll back snapshots,
review and edit each user's memories.

Pages are server-rendered with Jinja2 (autoescape on: every memory, message and tool output is
text, never markup) and served with a Content-Security-Policy that allows scripts from the app's
own ``/static`` only, so even a missed escape could not run an injected script. Charts use the
vendored Chart.js file in ``static/``; nothing is fetched from elsewhere.

Writes go through the library: feedback through :class:`memabra._feedback.RewardService`,
snapshot status through :class:`memabra.storage._snapshot_audit.SnapshotAudit` (with who and
when), memories through :class:`memabra._sql_memory.SQLMemory`. Each write is a POST that needs a
signed-in session and its CSRF token (or an ``Authorization: Bearer`` admin token, which a
browser never sends on its own), and is refused with 403 when the app is read-only or the
session (or bearer token) is a reviewer's.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from sqlalchemy.exc import OperationalError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memabra._admin import _views as views
from memabra._admin._auth import (
    AttemptThrottle,
    Credentials,
    SessionCodec,
    SessionRevocations,
)
from memabra._admin._body_limit import BodyLimit
from memabra._admin._conversation import TURNS, conversation_view
from memabra._admin._deletion_pages import DeletionPages
from memabra._admin._forms import (
    FILTER_FIELDS,
    error_field,
    list_query,
    parse_episode_filter,
    parse_feedback_form,
    parse_limit,
    parse_mempo_filter,
    parse_offset_cursor,
)
from memabra._admin._headers import SecurityHeaders
from memabra._admin._login_pages import LoginPages
from memabra._admin._memory_pages import MemoryPages
from memabra._admin._metrics_page import metrics_endpoint
from memabra._admin._notices import feedback_notice
from memabra._admin._payloads import PayloadPages, step_views, turn_views
from memabra._admin._plumbing import (
    _NOTICES,
    _Auth,
    _path_id,
)
from memabra._admin._policy import CurrentPolicy
from memabra._admin._policy_pages import PolicyPages
from memabra._admin._reward_view import reward_lines
from memabra._admin._sqlite_file import SqliteFileGuard, sqlite_error_handler, watch_sqlite_file
from memabra._admin._turn_pages import TurnPages
from memabra._admin._unavailable import not_writable_handler, timeout_handler, unavailable_handler
from memabra._config import load_reward_config
from memabra._episode_document import document_text, episode_document
from memabra._errors import ConfigError, InvalidRecordError
from memabra._feedback import RewardService, same_feedback
from memabra._health import DEFAULT_MAX_LAG
from memabra._records import Episode, Feedback, FeedbackKind, MemoryQuality
from memabra._retraction import post_retraction
from memabra._reward import RewardConfig
from memabra.storage import (
    DatabaseNotWritableError,
    DatabaseTimeoutError,
    DatabaseUnavailableError,
    EpisodeLog,
    RevokedSessions,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["create_app"]

logger = logging.getLogger("memabra")

_HERE = Path(__file__).parent
DEFAULT_SESSION_TTL = timedelta(hours=8)


class _Admin(LoginPages, PolicyPages, MemoryPages, DeletionPages, TurnPages, PayloadPages):
    """Endpoints (the policies and memories pages' in their own modules); :func:`create_app`
    wires them into a Starlette app."""

    # ------------------------------------------------------------------ pages

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/episodes", status_code=303)

    async def episodes(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            params = dict(request.query_params)
            try:
                flt, raw = parse_episode_filter(params)
                mempo = parse_mempo_filter(raw)
                limit = parse_limit(params.get("limit"))
                cursor = params.get("cursor") or None
                if raw.get("sort") == "reward":
                    offset = parse_offset_cursor(cursor)
                    page = await run_in_threadpool(self.mempo.lowest_rewards, flt, mempo, offset, limit)
                else:
                    page = await run_in_threadpool(self.mempo.newest, flt, mempo, cursor, limit)
            except InvalidRecordError as exc:
                # Show the form again as it was sent, with the message naming the bad field.
                raw = {k: v for k, v in params.items() if k in FILTER_FIELDS and v}
                versions = await run_in_threadpool(self.queries.policy_versions)
                scorers = await run_in_threadpool(self.mempo.scorers)
                return self._render(
                    "episodes.html",
                    400,
                    auth=auth,
                    page=None,
                    filters=raw,
                    error=str(exc),
                    error_field=error_field(str(exc), FILTER_FIELDS),
                    limit=50,
                    cursor=None,
                    versions=versions,
                    scorers=scorers,
                    worse={},
                    section="episodes",
                )
            versions = await run_in_threadpool(self.queries.policy_versions)
            scorers = await run_in_threadpool(self.mempo.scorers)
            # the rows MemPO graded -1 (a decision of theirs), with the scorers that did
            worse = await run_in_threadpool(self.mempo.worse, [e.id for e in page.items])
            return self._render(
                "episodes.html",
                auth=auth,
                worse=worse,
                # what the rows' links carry, so an episode's breadcrumb comes back to this page
                list_query=list_query([*raw.items(), ("cursor", cursor or ""), ("limit", params.get("limit", ""))]),
                page=page,
                filters=raw,
                error="",
                notice=_NOTICES.get(params.get("notice", ""), ""),
                limit=limit,
                cursor=cursor,
                versions=versions,
                scorers=scorers,
                section="episodes",
            )

        return await self._page(request, build)

    async def episode(self, request: Request) -> Response:
        async def build(auth: _Auth) -> Response:
            episode_id = _path_id(request, "episodes")
            if request.query_params.get("format") == "json":
                episode = await run_in_threadpool(self.log.get_episode, episode_id)
                bodies = await run_in_threadpool(self.log.injected_bodies, episode)
                labels = await run_in_threadpool(self._labels, episode)
                document = episode_document(episode, bodies, labels=[q for qs in labels.values() for q in qs])
                return Response(
                    document_text(document),
                    media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{_download_name(episode.id)}"'},
                )
            back = list_query(request.query_params.get("list", ""))
            context = await run_in_threadpool(self._episode_context, episode_id, back)
            notice = _NOTICES.get(request.query_params.get("notice", ""), "")
            return self._render("episode.html", auth=auth, notice=notice, error="", section="episodes", **context)

        return await self._page(request, build)

    def _episode_context(self, episode_id: str, back: str = "") -> dict[str, Any]:
        """The episode page's values; ``back``: the query of the list it was opened from."""
        episode = self.log.get_episode(episode_id)
        summary = self.queries.episode_summary(episode_id)
        # The log scores feedback by the same rule: late once final, or once the window has closed
        # even before the learner's next step finalises the reward.
        # by the log's clock, the deadline's (a host minutes apart would say open or closed wrongly)
        window_closed = summary is not None and self.log.database_now() > summary.feedback_due_at
        turns = (
            self.queries.conversation(episode.user_id, episode.thread_id, limit=TURNS)
            if episode.thread_id is not None
            else []
        )
        conversation = conversation_view(episode, turns)
        return {
            "episode": episode,
            # what its chosen skills and tools injected, by the digest each logged
            "bodies": self.log.injected_bodies(episode),
            "summary": summary,
            "feedback_late": episode.finalized_at is not None or window_closed,
            "conversation": conversation,
            # its bubbles, each long query or answer cut with a link to the whole (memabra._admin._payloads)
            "turns": turn_views(episode, conversation.turns),
            "decisions": views.decision_views(episode, self.current_policy),
            # each decision's MemPO labels, every scorer's
            "labels": self._labels(episode),
            "reward_lines": [] if episode.reward is None else reward_lines(episode.reward, self.reward_config),
            "feedback": [(f, views.feedback_summary(f)) for f in episode.feedback],
            "steps": step_views(episode),
            "idempotency_key": secrets.token_urlsafe(16),
            "list_query": back,
        }

    def _labels(self, episode: Episode) -> dict[str, list[MemoryQuality]]:
        """Each decision's MemPO labels (``memabra mempo score``'s), by scorer name."""
        labels: dict[str, list[MemoryQuality]] = {}
        for q in self.log.all_memory_scores([sel.id for sel in episode.selections]):
            labels.setdefault(q.decision_id, []).append(q)
        return labels

    # ------------------------------------------------------------------ writes

    async def post_feedback(self, request: Request) -> Response:
        async def apply(auth: _Auth, form: dict[str, str]) -> Response:
            episode_id = _path_id(request, "episodes", suffix="feedback")
            parsed = parse_feedback_form(form)
            feedback = Feedback(
                episode_id=episode_id,
                kind=FeedbackKind.EXPLICIT,
                source="admin",
                payload=parsed.payload,
                decision_id=parsed.decision_id,
                idempotency_key=f"admin:{parsed.idempotency_key}",
            )
            service = RewardService(self.log, self.reward_config)
            retraction = await run_in_threadpool(post_retraction, service, feedback, self._memory_backend)
            receipt = retraction.receipt
            back = list_query(form.get("list", ""))
            if receipt.status == "duplicate":
                earlier = await run_in_threadpool(self._stored_feedback, episode_id, receipt.feedback_id)
                if earlier is not None and not same_feedback(earlier, feedback):
                    return await self._feedback_conflict(auth, episode_id, earlier, back)
            # the operator learns whether the memory the correction names was retired, not only the reward
            notice = feedback_notice(retraction, feedback.signals.explicit.retract_memory)
            query = urlencode({"notice": notice, **({"list": back} if back else {})})
            return RedirectResponse(f"/episodes/{quote(episode_id, safe='')}?{query}#feedback", status_code=303)

        return await self._write(request, apply)

    def _stored_feedback(self, episode_id: str, feedback_id: str) -> Feedback | None:
        return next((f for f in self.log.get_episode(episode_id).feedback if f.id == feedback_id), None)

    async def _feedback_conflict(self, auth: _Auth, episode_id: str, earlier: Feedback, back: str) -> Response:
        """409: the form was already submitted with other values. The idempotency key makes a form
        record once (a resubmission is a no-op), so the earlier values stand; the page comes back
        with fresh forms for a new rating or correction."""
        what = "correction" if "correction" in earlier.payload else "rating"
        message = (
            f"This form was already submitted: its earlier {what} {views.feedback_summary(earlier)} "
            f"(recorded {views.format_time(earlier.received_at)} UTC) stands and nothing changed. "
            f"A form records once; to record a new {what}, use the fresh form below."
        )
        context = await run_in_threadpool(self._episode_context, episode_id, back)
        return self._render("episode.html", 409, auth=auth, notice="", error=message, section="episodes", **context)


def create_app(
    log_or_url: EpisodeLog | str | None,
    *,
    token: str | None = None,
    password: str | None = None,
    reviewer_token: str | None = None,
    reviewer_password: str | None = None,
    read_only: bool = False,
    session_ttl: timedelta = DEFAULT_SESSION_TTL,
    current_policy: CurrentPolicy | None = None,
    reward_config: RewardConfig | None = None,
    secret_key: bytes | None = None,
    secure_cookies: bool = False,
    revocations: SessionRevocations | None = None,
    throttle: AttemptThrottle | None = None,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    max_lag: timedelta = DEFAULT_MAX_LAG,
) -> Starlette:
    """The admin ASGI app over an episode log (an :class:`EpisodeLog`, or a database URL that the
    app opens and closes with its lifespan).

    ``token`` / ``password``: what an operator signs in with (at least one is required).
    ``reviewer_token`` / ``reviewer_password``: what a reviewer signs in with (optional): every
    page, every write refused with 403; each must differ from both operator credentials.
    ``read_only``: refuse every write with 403. ``session_ttl``: how long a sign-in lasts.
    ``current_policy``: what the current policy would choose for a logged decision (see
    :class:`memabra._admin.ActiveSnapshotPolicy`); ``None`` shows no "now" column.
    ``reward_config``: how feedback is scored (default: :func:`~memabra.load_reward_config`'s, as
    for an agent not given ``reward=``: every writer of one log scores under one weighting). ``secret_key`` signs
    session cookies (random per process by default, so a restart signs everyone out).
    ``secure_cookies``: mark the cookie ``Secure`` (serve over HTTPS then).
    ``revocations``: where logged-out sessions are kept (default: the log's database, shared by
    every worker). ``throttle``: the per-client limit on failed sign-ins and bearer tokens
    (default: :class:`~memabra._admin._auth.AttemptThrottle` with its documented limits).
    ``checkpointer``: the agent's LangGraph checkpointer; given, erasing a user deletes their
    conversation threads there too. ``max_lag``: how long a reward may wait on its way to a learner
    before the policies page and ``/metrics`` report it as a health problem (``memabra status
    --max-lag``'s bound: give both the same, so the page, the scrape and the probe agree).
    """
    if max_lag <= timedelta(0):
        raise ConfigError(f"max_lag must be a positive duration, got {max_lag}")
    credentials = Credentials(
        token=token, password=password, reviewer_token=reviewer_token, reviewer_password=reviewer_password
    )
    if reward_config is None:  # before the log opens: a bad setting is refused naming it
        reward_config = load_reward_config()
    owns_log = not isinstance(log_or_url, EpisodeLog)
    log = log_or_url if isinstance(log_or_url, EpisodeLog) else EpisodeLog(log_or_url)
    admin = _Admin(
        log,
        credentials=credentials,
        codec=SessionCodec(secret_key or secrets.token_bytes(32), session_ttl),
        read_only=read_only,
        current_policy=current_policy,
        reward_config=reward_config,
        secure_cookies=secure_cookies,
        revocations=revocations if revocations is not None else RevokedSessions(log),
        throttle=throttle if throttle is not None else AttemptThrottle(),
        checkpointer=checkpointer,
        max_lag=max_lag,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if owns_log:
                log.close()

    routes = [
        Route("/", admin.home),
        Route("/login", admin.login_form, methods=["GET"]),
        Route("/login", admin.login, methods=["POST"]),
        Route("/logout", admin.logout, methods=["POST"]),
        Route("/episodes", admin.episodes, methods=["GET"]),
        # ":path": an id may hold an encoded "/"; the handlers read it from the raw path (_path_id)
        Route("/episodes/{episode_id:path}/feedback", admin.post_feedback, methods=["POST"]),
        Route("/episodes/{episode_id:path}/delete", admin.delete_episode, methods=["POST"]),
        Route("/episodes/{episode_id:path}/raw", admin.raw_payload, methods=["GET"]),
        Route("/episodes/{episode_id:path}", admin.episode, methods=["GET"]),
        Route("/deletions", admin.deletions, methods=["GET"]),
        Route("/erase", admin.erase_user, methods=["POST"]),
        Route("/policies", admin.policies, methods=["GET"]),
        Route("/policies/promote", admin.promote, methods=["POST"]),
        Route("/policies/rollback", admin.rollback, methods=["POST"]),
        Route("/policies/forget-learner", admin.forget_learner, methods=["POST"]),
        Route("/turns", admin.turns, methods=["GET"]),
        Route("/turns/abandon", admin.abandon_turn, methods=["POST"]),
        Route("/memories", admin.memories, methods=["GET"]),
        Route("/memories/item", admin.memory, methods=["GET"]),
        Route("/memories/update", admin.update_memory, methods=["POST"]),
        Route("/memories/retire", admin.retire_memory, methods=["POST"]),
        Route("/memories/restore", admin.restore_memory, methods=["POST"]),
        Route("/metrics", metrics_endpoint(admin), methods=["GET"]),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    # a database outage is a 503 the client retries, not a 500 (memabra._admin._unavailable)
    # a database that answers but refuses writes is a 503 too, saying so: its own handler, since
    # Starlette takes the first of an error's classes it has one for
    handlers: dict[Any, Any] = {
        404: admin.not_found,
        DatabaseUnavailableError: unavailable_handler(admin),
        DatabaseNotWritableError: not_writable_handler(admin),
        # a statement PostgreSQL cancelled (statement_timeout, lock_timeout): a 503 too, not the 500
        # an OperationalError would be
        DatabaseTimeoutError: timeout_handler(admin),
    }
    # a SQLite file deleted, moved, replaced or unreadable is an outage too, not a 500 nor a ghost
    # read through a pooled connection (memabra._admin._sqlite_file)
    watch = watch_sqlite_file(log)
    if watch is not None:
        handlers[OperationalError] = sqlite_error_handler(admin, watch)
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    if watch is not None:
        app.add_middleware(SqliteFileGuard, admin=admin, watch=watch)
    app.add_middleware(BodyLimit)
    app.add_middleware(SecurityHeaders)  # added last, so outermost: the 413 gets its headers too
    app.state.admin = admin
    return app


def _download_name(episode_id: str) -> str:
    """A file name for an episode's JSON that no browser misreads: the id's safe characters only
    (ids are free text; a quote or a slash in a header's file name would break it)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in episode_id)
    return f"episode-{safe[:100]}.json"
