"""The exceptions memabra raises. Each message names the field or command at fault."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "FeedbackError",
    "InvalidFeedbackError",
    "InvalidRecordError",
    "MemabraError",
    "RouterError",
    "SchemaError",
    "SnapshotError",
    "StorageContentionError",
    "UnknownEpisodeError",
    "UnknownSnapshotError",
]


class MemabraError(Exception):
    """Base class of every error memabra raises on purpose."""


class InvalidRecordError(MemabraError, ValueError):
    """A record (candidate, selection, feedback, reward, ...) failed validation."""


class ConfigError(MemabraError, ValueError):
    """A configuration value (weights, URLs, TOML) is missing or malformed."""


class SchemaError(MemabraError, RuntimeError):
    """The database schema is missing or not at the version this code needs."""


class UnknownEpisodeError(MemabraError, KeyError):
    """An id names no episode or decision in the log."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown episode"


class FeedbackError(MemabraError, ValueError):
    """Feedback that cannot be applied (bad payload, unknown decision)."""


class RouterError(MemabraError, ValueError):
    """Bad input to a router: empty or duplicate candidates, NaN features, a reward for a
    selection the router never made, negative slots."""


class SnapshotError(MemabraError, ValueError):
    """A policy snapshot that cannot be restored (corrupted bytes, wrong learner)."""


class InvalidFeedbackError(FeedbackError, InvalidRecordError):
    """A feedback payload with an unknown key or a value of the wrong type or range."""


class UnknownSnapshotError(UnknownEpisodeError):
    """A version names no policy snapshot in the log (an ``UnknownEpisodeError`` for old callers)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown policy snapshot"


class StorageContentionError(MemabraError, RuntimeError):
    """A write kept meeting a lock, a deadlock or a serialisation failure after every retry:
    the database is more contended than it can serve (on SQLite, the point to move to PostgreSQL)."""


class MemoriesChangedError(MemabraError, RuntimeError):
    """A memory write was decided on a read of the user's memories that another writer (another
    process, or a write behind this backend) changed before the write could commit: nothing was
    written. ``remember`` reads again and decides again; raised to the caller only when every try
    met another write."""


class LogChangedError(MemabraError, RuntimeError):
    """A multi-pass read of the episode log found different decisions on its second pass: episodes
    were deleted, or committed late, while it ran. Running it again reads the log as it is then."""
