"""memabra.storage: the SQL episode log (SQLite by default, PostgreSQL via psycopg 3).

Takes and returns the records of :mod:`memabra`; ORM rows never leave this package.
"""

from memabra.storage._admin_memories import (
    MAX_MEMORY_PAGE,
    AdminMemories,
    MemoryOutcomes,
    MemoryPage,
    MemorySort,
    MemoryUsage,
    MemoryUse,
    MemoryUser,
)
from memabra.storage._admin_queries import DEFAULT_SAMPLE, AdminQueries
from memabra.storage._admin_records import (
    ConversationTurn,
    KindShare,
    PolicyVersionStats,
    RewardPoint,
    SnapshotInfo,
    TurnPage,
    VersionCount,
)
from memabra.storage._admin_sessions import RevokedSessions
from memabra.storage._deletion_log import DeletionEntry
from memabra.storage._embeddings import EmbeddingTable
from memabra.storage._engine import DEFAULT_URL, URL_ENV, DatabaseUnavailableError, make_engine, resolve_url
from memabra.storage._failures import FAILED_TURN_SOURCE, FAILURE_CAUSES
from memabra.storage._learner import (
    START,
    FinalReward,
    LearnerCheckpoint,
    LearnerStore,
    LeaseHolder,
    LeaseLostError,
    ReadPosition,
)
from memabra.storage._learner_claims import LearnerBusyError, RetentionHold
from memabra.storage._learner_lease import SQLITE_LEASE_TTL, LearnerLease
from memabra.storage._log import DEFAULT_FEEDBACK_WINDOW, EpisodeFilter, EpisodeLog, Scorer
from memabra.storage._memories import MemoryRegistry, forget_in_log, last_chosen
from memabra.storage._migrate import (
    check_schema,
    compatible_from,
    current_revision,
    downgrade,
    head_revision,
    known_revisions,
    upgrade,
)
from memabra.storage._open import open_log
from memabra.storage._policy_versions import SnapshotIndex, snapshot_group, unused_snapshot_version
from memabra.storage._refusals import DatabaseNotWritableError
from memabra.storage._retention import EpisodeDeletion, UserErasure
from memabra.storage._retotal import Retotalled
from memabra.storage._rows import clean_text
from memabra.storage._snapshot_audit import MAX_AUDIT_TEXT, Promotion, SnapshotAudit, StatusChange, status_history
from memabra.storage._snapshots import PruneResult
from memabra.storage._status import LogStatus, OpenTransaction, PolicyStatus, SnapshotRewards
from memabra.storage._suspended_turns import (
    PAUSES_KEY,
    RUNNING_TURN_LIMIT,
    KeptTurnCounts,
    SuspendedTurn,
    TurnWentOnError,
)
from memabra.storage._timeouts import DatabaseTimeoutError
from memabra.storage._tx import Transactions

__all__ = [
    "DEFAULT_FEEDBACK_WINDOW",
    "DEFAULT_SAMPLE",
    "DEFAULT_URL",
    "DatabaseNotWritableError",
    "DatabaseTimeoutError",
    "DatabaseUnavailableError",
    "FAILED_TURN_SOURCE",
    "FAILURE_CAUSES",
    "MAX_AUDIT_TEXT",
    "MAX_MEMORY_PAGE",
    "PAUSES_KEY",
    "RUNNING_TURN_LIMIT",
    "Retotalled",
    "SQLITE_LEASE_TTL",
    "START",
    "URL_ENV",
    "AdminMemories",
    "AdminQueries",
    "ConversationTurn",
    "EmbeddingTable",
    "DeletionEntry",
    "EpisodeDeletion",
    "EpisodeFilter",
    "EpisodeLog",
    "FinalReward",
    "KindShare",
    "LearnerBusyError",
    "LearnerCheckpoint",
    "LearnerLease",
    "LearnerStore",
    "LeaseHolder",
    "LeaseLostError",
    "LogStatus",
    "MemoryOutcomes",
    "MemoryPage",
    "MemoryRegistry",
    "MemorySort",
    "MemoryUsage",
    "MemoryUse",
    "RetentionHold",
    "MemoryUser",
    "OpenTransaction",
    "PolicyStatus",
    "PolicyVersionStats",
    "Promotion",
    "PruneResult",
    "ReadPosition",
    "RevokedSessions",
    "RewardPoint",
    "Scorer",
    "SnapshotAudit",
    "SnapshotIndex",
    "SnapshotInfo",
    "SnapshotRewards",
    "StatusChange",
    "SuspendedTurn",
    "Transactions",
    "TurnPage",
    "KeptTurnCounts",
    "TurnWentOnError",
    "UserErasure",
    "VersionCount",
    "check_schema",
    "clean_text",
    "compatible_from",
    "current_revision",
    "downgrade",
    "forget_in_log",
    "head_revision",
    "known_revisions",
    "last_chosen",
    "make_engine",
    "open_log",
    "resolve_url",
    "snapshot_group",
    "status_history",
    "unused_snapshot_version",
    "upgrade",
]
