"""Credentials, signed session cookies and CSRF tokens of the admin view.

A session is a cookie holding ``{authenticated, csrf, expires}`` signed with the app's secret key
(itsdangerous): the server keeps no session table, a tampered cookie fails its signature, and an
expired one is refused even though its signature is still good. Every session, signed in or not,
carries its own CSRF token; each form echoes it and each write compares it in constant time, so a
page on another origin cannot forge a write (and the cookie is ``SameSite=Strict`` besides).
Signing in issues a fresh session with a fresh token, so a token seen before sign-in is useless
afterwards.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from itsdangerous import BadSignature, URLSafeSerializer

from memabra._errors import ConfigError

__all__ = [
    "PASSWORD_ENV",
    "SESSION_COOKIE",
    "TOKEN_ENV",
    "Credentials",
    "SessionCodec",
    "SessionState",
    "WebSession",
    "is_loopback",
    "require_credentials_for",
]

SESSION_COOKIE = "memabra_admin"
TOKEN_ENV = "MEMABRA_ADMIN_TOKEN"
PASSWORD_ENV = "MEMABRA_ADMIN_PASSWORD"


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a reviewer may present: the admin token, the admin password, or both."""

    token: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        for name in ("token", "password"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) < 8):
                raise ConfigError(f"admin {name} must be a text of at least 8 characters")
        if self.token is None and self.password is None:
            raise ConfigError(
                f"the admin view needs a token or a password (--token or ${TOKEN_ENV}, --password or ${PASSWORD_ENV})"
            )

    def accepts(self, secret: str) -> bool:
        """Whether ``secret`` is the token or the password (compared in constant time)."""
        given = secret.encode()
        matches = [hmac.compare_digest(given, known.encode()) for known in (self.token, self.password) if known is not None]
        return any(matches)

    def accepts_bearer(self, token: str) -> bool:
        """Whether ``token`` is the admin token (an ``Authorization: Bearer`` header)."""
        return self.token is not None and hmac.compare_digest(token.encode(), self.token.encode())


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

    def csrf_matches(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token).encode(), self.csrf.encode())


class SessionCodec:
    """Issues and reads signed session cookies that expire ``ttl`` after they were issued."""

    def __init__(self, secret_key: bytes, ttl: timedelta, *, clock: Callable[[], float] = time.time) -> None:
        if ttl.total_seconds() <= 0:
            raise ConfigError(f"session_ttl must be positive, got {ttl}")
        self._serializer = URLSafeSerializer(secret_key, salt="memabra-admin-session")
        self.ttl = ttl
        self._clock = clock

    def issue(self, *, authenticated: bool) -> tuple[str, WebSession]:
        session = WebSession(
            authenticated=authenticated,
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self.ttl.total_seconds(),
        )
        cookie = self._serializer.dumps({"a": session.authenticated, "c": session.csrf, "e": session.expires_at})
        return cookie, session

    def read(self, cookie: str | None) -> tuple[SessionState, WebSession | None]:
        if not cookie:
            return SessionState.MISSING, None
        try:
            data = self._serializer.loads(cookie)
            session = WebSession(authenticated=bool(data["a"]), csrf=str(data["c"]), expires_at=float(data["e"]))
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
