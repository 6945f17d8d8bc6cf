"""The admin web view: review routing decisions, record feedback, promote or roll back snapshots,
review and edit each user's memories.

Needs the ``admin`` extra (Starlette via FastAPI, Jinja2, itsdangerous, python-multipart, uvicorn).
``memabra admin --db URL`` serves it; :func:`create_app` builds the ASGI app for embedding.
"""

from __future__ import annotations

from memabra._admin._app import DEFAULT_SESSION_TTL, create_app
from memabra._admin._auth import (
    PASSWORD_ENV,
    REVIEWER_PASSWORD_ENV,
    REVIEWER_TOKEN_ENV,
    TOKEN_ENV,
    Credentials,
    Role,
    is_loopback,
    require_credentials_for,
)
from memabra._admin._policy import ActiveSnapshotPolicy, CurrentPolicy

__all__ = [
    "DEFAULT_SESSION_TTL",
    "PASSWORD_ENV",
    "REVIEWER_PASSWORD_ENV",
    "REVIEWER_TOKEN_ENV",
    "TOKEN_ENV",
    "ActiveSnapshotPolicy",
    "Credentials",
    "CurrentPolicy",
    "Role",
    "create_app",
    "is_loopback",
    "require_credentials_for",
]
