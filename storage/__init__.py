"""memabra.storage: the SQL episode log (SQLite by default, PostgreSQL via psycopg 3).

Takes and returns the records of :mod:`memabra`; ORM rows never leave this package.
"""

from memabra.storage._engine import DEFAULT_URL, URL_ENV, make_engine, resolve_url
from memabra.storage._log import DEFAULT_FEEDBACK_WINDOW, CandidateStats, EpisodeFilter, EpisodeLog
from memabra.storage._memories import EmbeddingTable, MemoryRegistry, forget_in_log, last_chosen
from memabra.storage._migrate import check_schema, current_revision, downgrade, head_revision, upgrade
from memabra.storage._open import open_log

__all__ = [
    "DEFAULT_FEEDBACK_WINDOW",
    "DEFAULT_URL",
    "URL_ENV",
    "CandidateStats",
    "EmbeddingTable",
    "EpisodeFilter",
    "EpisodeLog",
    "MemoryRegistry",
    "check_schema",
    "current_revision",
    "downgrade",
    "forget_in_log",
    "head_revision",
    "last_chosen",
    "make_engine",
    "open_log",
    "resolve_url",
    "upgrade",
]
