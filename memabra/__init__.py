"""memabra: a contextual-bandit router for a LangGraph agent's memories, skills and tools."""

from __future__ import annotations

from memabra._errors import (
    ConfigError,
    FeedbackError,
    InvalidRecordError,
    MemabraError,
    RouterError,
    SchemaError,
    SnapshotError,
    UnknownEpisodeError,
)
from memabra._records import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    FeedbackKind,
    PolicySnapshot,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
    Step,
    StepKind,
)

__version__ = "0.1.0"

__all__ = [
    "STOP_ID",
    "Budget",
    "Candidate",
    "CandidateKind",
    "ConfigError",
    "Episode",
    "Feedback",
    "FeedbackError",
    "FeedbackKind",
    "InvalidRecordError",
    "MemabraError",
    "PolicySnapshot",
    "RewardBreakdown",
    "RewardComponents",
    "RewardWeights",
    "RouterError",
    "RoutingContext",
    "SchemaError",
    "ScoredCandidate",
    "Selection",
    "SlotDraw",
    "SnapshotError",
    "Step",
    "StepKind",
    "UnknownEpisodeError",
    "__version__",
]
