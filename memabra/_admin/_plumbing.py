"""Request plumbing shared by the admin's endpoints: sign-in checks, rendering, error pages, write guards
(the security headers are :mod:`memabra._admin._headers`'s)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from memabra._admin import _views as views
from memabra._admin._auth import (
    SESSION_COOKIE,
    AttemptThrottle,
    Credentials,
    Role,
    SessionCodec,
    SessionRevocations,
    SessionState,
    WebSession,
)
from memabra._admin._forms import FormError, clean_field
from memabra._admin._notices import NOTICES
from memabra._admin._policy import CurrentPolicy
from memabra._admin._times import time_ago, time_element, time_text
from memabra._errors import FeedbackError, InvalidRecordError, SnapshotError, UnknownEpisodeError
from memabra._health import DEFAULT_MAX_LAG
from memabra._reward import RewardConfig
from memabra.storage import AdminMemories, AdminQueries, EpisodeLog, SnapshotAudit
from memabra.storage._admin_mempo import MemPOListing
from memabra.storage._tx import one_call

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from memabra._sql_memory import SQLMemory

_HERE = Path(__file__).parent

logger = logging.getLogger("memabra")

# every page reads its notice here, by the name it always had
_NOTICES = NOTICES


@dataclass(frozen=True, slots=True)
class _Auth:
    state: SessionState
    session: WebSession | None
    bearer: bool
    bearer_role: Role = Role.OPERATOR

    @property
    def ok(self) -> bool:
        return self.bearer or (self.session is not None and self.session.authenticated)

    @property
    def role(self) -> Role | None:
        """The signed-in role (``None`` when not signed in)."""
        if self.bearer:
            return self.bearer_role
        return self.session.role if self.ok and self.session is not None else None

    @property
    def reviewer(self) -> bool:
        return self.role is Role.REVIEWER

    @property
    def principal(self) -> str:
        """Who makes a write, for the audit trail: the role and the credential it signed in with."""
        role = self.role.value if self.role is not None else "anonymous"
        if self.bearer:
            return f"{role} bearer token"
        if self.session is not None and self.session.principal:
            return f"{role} {self.session.principal} sign-in"
        return f"{role} signed-in session"


class _HttpError(Exception):
    """An error page: its status, title and message, and where it leads back to (``back``: a
    link's URL and text; the episodes when not given)."""

    def __init__(
        self,
        status: int,
        title: str,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        back: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message
        self.headers = dict(headers or {})
        self.back = back or ("/episodes", "Back to the episodes")


def _locked_out(seconds: float) -> _HttpError:
    wait = max(1, round(seconds))
    return _HttpError(
        429,
        "Too many attempts",
        f"Too many wrong tokens or passwords from this address; try again in {wait} s.",
        {"retry-after": str(wait)},
    )


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown client"


class _AdminBase:
    """The admin's shared state and request plumbing; :class:`~memabra._admin._app._Admin` adds the endpoints."""

    def __init__(
        self,
        log: EpisodeLog,
        *,
        credentials: Credentials,
        codec: SessionCodec,
        read_only: bool,
        current_policy: CurrentPolicy | None,
        reward_config: RewardConfig | None,
        secure_cookies: bool,
        revocations: SessionRevocations,
        throttle: AttemptThrottle,
        checkpointer: BaseCheckpointSaver[str] | None = None,
        max_lag: timedelta = DEFAULT_MAX_LAG,
    ) -> None:
        self.log = log
        self.max_lag = max_lag
        self.checkpointer = checkpointer
        self.revocations = revocations
        self.throttle = throttle
        self.queries = AdminQueries(log)
        self.mempo = MemPOListing(log)
        self.memory_queries = AdminMemories(log)
        self.audit = SnapshotAudit(log)
        self._memories: SQLMemory | None = None
        self.credentials = credentials
        self.codec = codec
        self.read_only = read_only
        self.current_policy = current_policy
        self.reward_config = reward_config
        self.secure_cookies = secure_cookies
        self.templates = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            time=time_element,
            time_text=time_text,
            ago=time_ago,
            num=views.format_number,
            prob=views.format_probability,
            truncate_text=views.truncate,
        )
        self.templates.filters.update(urlpart=views.url_part, code=views.code_spans, signed=views.format_difference)
        self.templates.globals.update(filters_query=views.filters_query, failure_titles=views.FAILURE_TITLES)

    def _memory_backend(self) -> SQLMemory:
        """The registry's memories, as ``memabra memories`` edits them (built on first use: it
        imports the router package, which the other pages do not need)."""
        if self._memories is None:
            from memabra._sql_memory import SQLMemory

            self._memories = SQLMemory(self.log)
        return self._memories

    # ------------------------------------------------------------------ plumbing

    async def _authenticate(self, request: Request) -> _Auth:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            client = _client(request)
            locked = self.throttle.locked_for(client)
            if locked > 0:
                raise _locked_out(locked)
            role = self.credentials.bearer_role(header[7:].strip())
            if role is not None:
                self.throttle.succeeded(client)
                return _Auth(SessionState.VALID, None, bearer=True, bearer_role=role)
            await asyncio.sleep(self.throttle.failed(client, "bearer token"))
            raise _HttpError(401, "Not signed in", "The bearer token is wrong.")
        state, session = await self._read_session(request)
        return _Auth(state, session, bearer=False)

    async def _read_session(self, request: Request) -> tuple[SessionState, WebSession | None]:
        """The request's session cookie, refused (as missing) once its session was logged out."""
        state, session = self.codec.read(request.cookies.get(SESSION_COOKIE))
        if session is not None and await run_in_threadpool(self.revocations.is_revoked, session.id):
            return SessionState.MISSING, None
        return state, session

    def _render(
        self,
        name: str,
        status: int = 200,
        *,
        auth: _Auth | None = None,
        headers: Mapping[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        headers = headers or {}
        template = self.templates.get_template(name)
        session = auth.session if auth is not None else None
        reviewer = auth is not None and auth.reviewer
        html = template.render(
            # a reviewer sees the pages as read-only ones: no write controls
            read_only=self.read_only or reviewer,
            reviewer=reviewer,
            csrf_token=session.csrf if session is not None else "",
            signed_in=auth is not None and auth.ok,
            cookie_session=session is not None,
            erases_threads=self.checkpointer is not None,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        response.headers["cache-control"] = "no-store"
        for header, value in headers.items():
            response.headers[header] = value
        return response

    def _cookie_secure(self, request: Request) -> bool:
        """Whether the session cookie is marked ``Secure``: always with ``secure_cookies``, and
        whenever the request came over HTTPS. Behind a TLS-terminating proxy that is what the
        proxy's ``X-Forwarded-Proto`` says, which uvicorn applies only from the addresses its
        ``--forwarded-allow-ips`` trusts (a client cannot claim HTTPS through an untrusted hop)."""
        return self.secure_cookies or request.url.scheme == "https"

    def _set_session(self, request: Request, response: Response, cookie: str) -> None:
        # A browser-session cookie: expiry is enforced by the signed payload, and a cookie that
        # outlives it lets the sign-in page say "expired" rather than just "sign in".
        response.set_cookie(
            SESSION_COOKIE,
            cookie,
            httponly=True,
            samesite="strict",
            secure=self._cookie_secure(request),
            path="/",
        )

    def _clear_session(self, request: Request, response: Response) -> None:
        response.delete_cookie(
            SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=self._cookie_secure(request)
        )

    def _error(self, exc: _HttpError, auth: _Auth | None = None) -> HTMLResponse:
        return self._render(
            "error.html",
            exc.status,
            auth=auth,
            headers=exc.headers,
            title=exc.title,
            message=exc.message,
            back_url=exc.back[0],
            back_label=exc.back[1],
        )

    async def not_found(self, request: Request, exc: Exception) -> Response:
        """The admin's own page for a URL it does not serve (404), with the navigation when signed in."""
        try:
            auth: _Auth | None = await self._authenticate(request)
        except _HttpError:
            auth = None  # a wrong bearer token: the page still says "not found", signed out
        return self._error(_HttpError(404, "Not found", f"No page at {request.url.path}."), auth)

    def _login_redirect(self, request: Request, auth: _Auth) -> Response:
        target = _raw_path(request) + (f"?{request.url.query}" if request.url.query else "")
        query = f"next={quote(target, safe='')}"
        if auth.state is SessionState.EXPIRED:
            query += "&expired=1"
        return RedirectResponse(f"/login?{query}", status_code=303)

    async def _guard_write(self, request: Request) -> tuple[_Auth, dict[str, str]]:
        """Sign-in, role, read-only, same origin and CSRF checks shared by every write."""
        auth = await self._authenticate(request)
        if not auth.ok:
            expired = auth.state is SessionState.EXPIRED
            raise _HttpError(
                401,
                "Not signed in",
                "Your session expired; sign in again." if expired else "Sign in to make changes.",
            )
        if auth.reviewer:
            logger.warning(
                "admin: refused %s %s to %s from %s", request.method, request.url.path, auth.principal, _client(request)
            )
            raise _HttpError(
                403,
                "Reviewers cannot make changes",
                "Signed in as a reviewer: you can see every page but change nothing. An operator "
                "(signed in with the operator token or password) can make this change.",
            )
        if self.read_only:
            raise _HttpError(403, "Read-only", "This admin view is read-only: it refuses every write.")
        origin = request.headers.get("origin")
        if origin and urlparse(origin).netloc != request.headers.get("host", ""):
            raise _HttpError(403, "Forbidden", "The request came from another origin.")
        form = {k: clean_field(v) for k, v in (await request.form()).items() if isinstance(v, str)}
        if not auth.bearer and (auth.session is None or not auth.session.csrf_matches(form.get("csrf_token"))):
            raise _HttpError(
                403, "Forbidden", "The form's CSRF token is missing or wrong; reload the page and try again."
            )
        return auth, form

    async def _page(
        self,
        request: Request,
        build: Callable[[_Auth], Awaitable[Response]],
    ) -> Response:
        try:
            auth = await self._authenticate(request)
        except _HttpError as exc:
            return self._error(exc)
        if not auth.ok:
            return self._login_redirect(request, auth)
        try:
            return await build(auth)
        except _HttpError as exc:
            return self._error(exc, auth)
        except UnknownEpisodeError as exc:
            return self._error(_HttpError(404, "Not found", str(exc)), auth)
        except (InvalidRecordError, FeedbackError) as exc:
            return self._error(_HttpError(400, "Bad request", str(exc)), auth)

    async def _write(
        self,
        request: Request,
        apply: Callable[[_Auth, dict[str, str]], Awaitable[Response]],
    ) -> Response:
        auth: _Auth | None = None
        try:
            auth, form = await self._guard_write(request)
            with one_call():  # a change of several writes: the 503 says so once one committed
                return await apply(auth, form)
        except _HttpError as exc:
            return self._error(exc, auth)
        except UnknownEpisodeError as exc:
            return self._error(_HttpError(404, "Not found", str(exc)), auth)
        except SnapshotError as exc:
            return self._error(_HttpError(409, "Conflict", str(exc)), auth)
        except (InvalidRecordError, FeedbackError) as exc:
            return self._error(_HttpError(400, "Bad request", str(exc)), auth)


def _required(form: Mapping[str, str], name: str) -> str:
    value = form.get(name, "").strip()
    if not value:
        raise FormError(f"{name} is required")
    return value


def _safe_next(target: str | None) -> str:
    """Only a path on this site: an open redirect would let a link sign someone into a trap."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/episodes"
    return target


def _raw_path(request: Request) -> str:
    """The path as the client sent it, still percent-encoded: an id holding an encoded ``/``
    stays one segment (the decoded ``request.url.path`` would split it)."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else quote(request.url.path)


def _path_id(request: Request, parent: str, *, suffix: str | None = None) -> str:
    """The id in ``.../{parent}/{id}`` (or ``.../{parent}/{id}/{suffix}``), decoded from its one
    raw path segment; 404 when the path has more segments (an unencoded ``/`` in the id)."""
    segments = _raw_path(request).split("/")
    if suffix is not None:
        if not segments or segments[-1] != suffix:
            raise _HttpError(404, "Not found", "No such page.")
        segments = segments[:-1]
    if len(segments) < 2 or segments[-2] != parent or not segments[-1]:
        raise _HttpError(404, "Not found", "No such page: encode a '/' in an id as %2F.")
    return unquote(segments[-1])
