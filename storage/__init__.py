"""memabra.storage: the SQL episode log (SQLite by default, PostgreSQL via psycopg 3).

Takes and returns the records of :mod:`memabra`; ORM rows never leave this package.
"""

from memabra.storage._engine import DEFAULT_URL, URL_ENV, make_engine, resolve_url
from memabra.storage._learner import START, FinalReward, LearnerCheckpoint, LearnerStore, LeaseLostError, ReadPosition
from memabra.storage._learner_lease import SQLITE_LEASE_TTL, LearnerLease
from memabra.storage._log import DEFAULT_FEEDBACK_WINDOW, CandidateStats, EpisodeFilter, EpisodeLog
from memabra.storage._migrate import check_schema, current_revision, downgrade, head_revision, upgrade

__all__ = [
    "DEFAULT_FEEDBACK_WINDOW",
    "DEFAULT_URL",
    "URL_ENV",
    "CandidateStats",
    "EpisodeFilter",
    "EpisodeLog",
    "FinalReward",
    "LearnerCheckpoint",
    "LearnerLease",
    "LearnerStore",
    "LeaseLostError",
    "ReadPosition",
    "SQLITE_LEASE_TTL",
    "START",
    "check_schema",
    "current_revision",
    "downgrade",
    "head_revision",
    "make_engine",
    "resolve_url",
    "upgrade",
]
