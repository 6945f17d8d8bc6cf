"""Opening the log the way an embedded default should behave."""

from __future__ import annotations

from memabra.storage._engine import make_engine
from memabra.storage._log import EpisodeLog
from memabra.storage._migrate import current_revision, upgrade

__all__ = ["open_log"]


def open_log(url: str | None = None) -> EpisodeLog:
    """An :class:`EpisodeLog` on ``url``. A SQLite database with no memabra schema yet (a new
    file) gets it here, so the embedded default works as written; any other database must be
    migrated with ``memabra db upgrade``, and the error says so."""
    engine = make_engine(url)
    try:
        if engine.dialect.name == "sqlite" and current_revision(engine) is None:
            upgrade(engine)
    finally:
        engine.dispose()
    return EpisodeLog(url)
