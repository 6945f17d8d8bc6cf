"""Credentials, signed session cookies and CSRF tokens of the admin view.

A session is a cookie holding ``{authenticated, csrf, expires, role}`` signed with the app's secret key
(itsdangerous): the server keeps no session table, a tampered cookie fails its signature, and an
expired one is refused even though its signature is still good. Every session, signed in or not,
carries its own CSRF token; each form echoes it and each write compares it in constant time, so a
page on another origin cannot forge a write (and the cookie is ``SameSite=Strict`` besides).
Signing in issues a fresh session with a fresh token, so a token seen before sign-in is useless
afterwards.

Two roles sign in (:class:`Role`): an operator (``MEMABRA_ADMIN_TOKEN`` / ``_PASSWORD``) may write;
a reviewer (``MEMABRA_ADMIN_REVIEWER_TOKEN`` / ``_PASSWORD``) sees every page and may not. The role
is in the signed cookie, so it cannot be edited. Cookies carry it since their salt's ``v2``: a
cookie signed before roles (the old salt, no role) was an operator sign-in and reads as one, and a
worker of the old code cannot read a new cookie at all (it would not know a reviewer's role).

Each cookie also carries a random session id. Logging out revokes that id server-side
(:class:`SessionRevocations`; the app's default keeps them in the episode log's database, so every
worker serving the admin refuses the old cookie, not just the one that handled the logout).

Guessing is throttled per client (:class:`AttemptThrottle`): every failed sign-in or bearer
token waits a little longer than the one before, and :data:`MAX_FAILURES` failures within
:data:`FAILURE_WINDOW` lock the client out for :data:`LOCKOUT`; each failure and each lockout is
logged as a warning. The counts live in the serving process (a lockout is per worker). An IPv6
client counts with its whole /64 network (:func:`throttled_client`).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Protocol

from itsdangerous import BadSignature, URLSafeSerializer

from memabra._errors import ConfigError

__all__ = [
    "FAILURE_WINDOW",
    "LOCKOUT",
    "MAX_FAILURES",
    "PASSWORD_ENV",
    "REVIEWER_PASSWORD_ENV",
    "REVIEWER_TOKEN_ENV",
    "SESSION_COOKIE",
    "TOKEN_ENV",
    "AttemptThrottle",
    "Credentials",
    "InMemoryRevocations",
    "Role",
    "SessionCodec",
    "SessionRevocations",
    "SessionState",
    "SignIn",
    "WebSession",
    "is_loopback",
    "require_credentials_for",
]

SESSION_COOKIE = "memabra_admin"
TOKEN_ENV = "MEMABRA_ADMIN_TOKEN"
PASSWORD_ENV = "MEMABRA_ADMIN_PASSWORD"
REVIEWER_TOKEN_ENV = "MEMABRA_ADMIN_REVIEWER_TOKEN"
REVIEWER_PASSWORD_ENV = "MEMABRA_ADMIN_REVIEWER_PASSWORD"

logger = logging.getLogger("memabra")

# A person mistypes a password a few times; ten wrong secrets within five minutes is a script.
MAX_FAILURES = 10
FAILURE_WINDOW = timedelta(minutes=5)
# Long enough to make guessing hopeless (at most 10 tries per quarter hour), short enough that a
# locked-out reviewer only waits for a coffee.
LOCKOUT = timedelta(minutes=15)
# The first failure waits this long and each further one twice as long as the one before...
_FIRST_FAILURE_DELAY_S = 0.25
# ... up to this: the delay slows a script down without holding a worker for long.
_MAX_FAILURE_DELAY_S = 4.0
# Clients remembered at once; beyond this the least recently failing one is forgotten, so a flood
# of addresses cannot grow the table without bound.
_MAX_TRACKED_CLIENTS = 10_000


class Role(Enum):
    """Who a sign-in is: an operator may write; a reviewer sees every page and may not write."""

    OPERATOR = "operator"
    REVIEWER = "reviewer"


@dataclass(frozen=True, slots=True)
class SignIn:
    """What a secret signed in as: its role and which credential (``token`` or ``password``)."""

    role: Role
    credential: str


@dataclass(frozen=True, slots=True)
class Credentials:
    """What may be presented: the operator token and/or password (at least one), and optionally a
    reviewer token and/or password (sign-ins that can read everything and write nothing)."""

    # out of the repr: a log line or a traceback that shows the app's state must not show a secret
    token: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    reviewer_token: str | None = field(default=None, repr=False)
    reviewer_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("token", "password", "reviewer_token", "reviewer_password"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) < 8):
                raise ConfigError(f"admin {name.replace('_', ' ')} must be a text of at least 8 characters")
        if self.token is None and self.password is None:
            raise ConfigError(
                f"the admin view needs a token or a password (--token or ${TOKEN_ENV}, --password or ${PASSWORD_ENV})"
            )
        for reviewer in ("reviewer_token", "reviewer_password"):
            for operator in ("token", "password"):
                mine, theirs = getattr(self, reviewer), getattr(self, operator)
                if mine is not None and theirs is not None and hmac.compare_digest(mine.encode(), theirs.encode()):
                    raise ConfigError(
                        f"the admin {reviewer.replace('_', ' ')} equals the operator {operator}: a reviewer "
                        "credential must differ from every operator one, or reviewers could sign in as operators"
                    )

    def _known(self) -> tuple[tuple[SignIn, str | None], ...]:
        return (
            (SignIn(Role.OPERATOR, "token"), self.token),
            (SignIn(Role.OPERATOR, "password"), self.password),
            (SignIn(Role.REVIEWER, "token"), self.reviewer_token),
            (SignIn(Role.REVIEWER, "password"), self.reviewer_password),
        )

    def accepts(self, secret: str) -> bool:
        """Whether ``secret`` is any configured credential (compared in constant time)."""
        return self.principal_of(secret) is not None

    def principal_of(self, secret: str) -> SignIn | None:
        """Which credential ``secret`` is, with its role, or ``None``; every configured one is
        compared, in constant time, whichever matches."""
        given = secret.encode()
        matches = [
            (who, hmac.compare_digest(given, known.encode())) for who, known in self._known() if known is not None
        ]
        return next((who for who, matched in matches if matched), None)

    def bearer_role(self, token: str) -> Role | None:
        """The role of ``token`` as an ``Authorization: Bearer`` header (an operator or reviewer
        token; passwords are for the sign-in form), or ``None``; compared in constant time."""
        given = token.encode()
        matches = [
            (who.role, hmac.compare_digest(given, known.encode()))
            for who, known in self._known()
            if known is not None and who.credential == "token"
        ]
        return next((role for role, matched in matches if matched), None)

    def accepts_bearer(self, token: str) -> bool:
        """Whether ``token`` is the operator token (a bearer that may write)."""
        return self.bearer_role(token) is Role.OPERATOR


def throttled_client(client: str) -> str:
    """Whom failures count against: an IPv4 address, or the /64 network of an IPv6 one (a single
    host is usually handed a whole /64, so counting per address would let it guess without end)."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client  # not an address (a unix socket, a test client): counted as it is
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return client


@dataclass
class _Failures:
    times: list[float]
    locked_until: float = 0.0


class AttemptThrottle:
    """Counts failed sign-ins and bearer tokens per client and locks out a client that keeps failing.

    ``locked_for(client)``: seconds until ``client`` may try again (0 when it may).
    ``failed(client, what)``: records a failure and returns how long to delay the answer.
    ``succeeded(client)``: forgets the client's failures.
    """

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        window: timedelta = FAILURE_WINDOW,
        lockout: timedelta = LOCKOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_failures < 1:
            raise ConfigError(f"max_failures must be at least 1, got {max_failures}")
        if window.total_seconds() <= 0 or lockout.total_seconds() <= 0:
            raise ConfigError("the failure window and the lockout must be positive")
        self.max_failures = max_failures
        self.window = window
        self.lockout = lockout
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: OrderedDict[str, _Failures] = OrderedDict()

    def locked_for(self, client: str) -> float:
        client = throttled_client(client)
        with self._lock:
            entry = self._clients.get(client)
            if entry is None:
                return 0.0
            return max(0.0, entry.locked_until - self._clock())

    def failed(self, client: str, what: str) -> float:
        client = throttled_client(client)
        now = self._clock()
        horizon = now - self.window.total_seconds()
        with self._lock:
            entry = self._clients.pop(client, None) or _Failures([])
            entry.times = [t for t in entry.times if t > horizon] + [now]
            self._clients[client] = entry
            while len(self._clients) > _MAX_TRACKED_CLIENTS:
                self._clients.popitem(last=False)
            count = len(entry.times)
            if count >= self.max_failures:
                entry.locked_until = now + self.lockout.total_seconds()
                entry.times = []
        window_min = self.window.total_seconds() / 60
        if count >= self.max_failures:
            logger.warning(
                "admin: %s locked out for %.0f s after %d failed sign-in or bearer attempts within %.0f min (last: %s)",
                client,
                self.lockout.total_seconds(),
                count,
                window_min,
                what,
            )
        else:
            logger.warning(
                "admin: failed %s from %s (%d of %d allowed within %.0f min)",
                what,
                client,
                count,
                self.max_failures,
                window_min,
            )
        return min(_FIRST_FAILURE_DELAY_S * 2.0 ** (count - 1), _MAX_FAILURE_DELAY_S)

    def succeeded(self, client: str) -> None:
        client = throttled_client(client)
        with self._lock:
            entry = self._clients.get(client)
            if entry is not None and entry.locked_until <= self._clock():
                del self._clients[client]


class SessionRevocations(Protocol):
    """Where logged-out session ids are kept until their cookies expire (shared by every worker)."""

    def revoke(self, session_id: str, expires_at: datetime) -> None: ...

    def is_revoked(self, session_id: str) -> bool: ...


class InMemoryRevocations:
    """:class:`SessionRevocations` for one process (tests, or an admin that runs as one worker)."""

    def __init__(self) -> None:
        self._revoked: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def revoke(self, session_id: str, expires_at: datetime) -> None:
        now = datetime.now(UTC)
        with self._lock:
            self._revoked = {k: v for k, v in self._revoked.items() if v > now}
            self._revoked[session_id] = expires_at

    def is_revoked(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._revoked


class SessionState(Enum):
    MISSING = "missing"
    INVALID = "invalid"
    EXPIRED = "expired"
    VALID = "valid"


@dataclass(frozen=True, slots=True)
class WebSession:
    """A decoded session cookie."""

    authenticated: bool
    csrf: str
    expires_at: float
    id: str = ""
    # what the session signed in with ("token" or "password"): the audit trail's "who"
    principal: str = ""
    role: Role = Role.OPERATOR

    @property
    def expires(self) -> datetime:
        return datetime.fromtimestamp(self.expires_at, UTC)

    def csrf_matches(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token).encode(), self.csrf.encode())


class SessionCodec:
    """Issues and reads signed session cookies that expire ``ttl`` after they were issued."""

    def __init__(self, secret_key: bytes, ttl: timedelta, *, clock: Callable[[], float] = time.time) -> None:
        if ttl.total_seconds() <= 0:
            raise ConfigError(f"session_ttl must be positive, got {ttl}")
        self._serializer = URLSafeSerializer(secret_key, salt="memabra-admin-session-v2")
        # cookies signed before roles: read as operator sessions, never issued
        self._before_roles = URLSafeSerializer(secret_key, salt="memabra-admin-session")
        self.ttl = ttl
        self._clock = clock

    def issue(self, *, authenticated: bool, principal: str = "", role: Role = Role.OPERATOR) -> tuple[str, WebSession]:
        session = WebSession(
            authenticated=authenticated,
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self.ttl.total_seconds(),
            id=secrets.token_urlsafe(16),
            principal=principal,
            role=role,
        )
        cookie = self._serializer.dumps(
            {
                "a": session.authenticated,
                "c": session.csrf,
                "e": session.expires_at,
                "i": session.id,
                "p": principal,
                "r": role.value,
            }
        )
        return cookie, session

    def read(self, cookie: str | None) -> tuple[SessionState, WebSession | None]:
        if not cookie:
            return SessionState.MISSING, None
        try:
            try:
                data = self._serializer.loads(cookie)
                role = Role(data["r"])  # a cookie of this salt always names its role
            except BadSignature:
                data = self._before_roles.loads(cookie)
                role = Role.OPERATOR  # signed before reviewers existed: only operators could sign in
            session = WebSession(
                authenticated=bool(data["a"]),
                csrf=str(data["c"]),
                expires_at=float(data["e"]),
                id=str(data["i"]),
                principal=str(data.get("p", "")),  # cookies signed before sign-ins were named lack it
                role=role,
            )
        except (BadSignature, KeyError, TypeError, ValueError):
            return SessionState.INVALID, None
        if session.expires_at <= self._clock():
            return SessionState.EXPIRED, None
        return SessionState.VALID, session


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_credentials_for(host: str, *, token: str | None, password: str | None) -> None:
    """Refuse to serve on a non-loopback address unless a token or password was configured."""
    if not is_loopback(host) and not token and not password:
        raise ConfigError(
            f"refusing to listen on {host!r} without credentials: set --token / ${TOKEN_ENV} or "
            f"--password / ${PASSWORD_ENV}, or listen on 127.0.0.1"
        )
