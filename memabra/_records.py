"""Typed, immutable records that cross module boundaries.

Every record is a frozen dataclass with slots. Sequences are tuples and free-form metadata is a
read-only mapping, so a record handed to the router, the log or the admin view cannot be changed
behind its producer's back. Validation happens in ``__post_init__`` and raises
:class:`~memabra._errors.InvalidRecordError` naming the offending field.
"""

from memabra._records_listing import EpisodeSummary, Page, RegistryItem, UsageCounts
from memabra._records_offline import GoldDecision, LoggedDecision, MemoryQuality, OPEResult
from memabra._records_outcomes import (
    COMPONENT_RANGES,
    Episode,
    Feedback,
    FeedbackReceipt,
    LearningItem,
    PolicySnapshot,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    Step,
)
from memabra._records_routing import (
    MAX_ID_LENGTH,
    STOP_ID,
    USAGE_METADATA_KEYS,
    Budget,
    Candidate,
    CandidateKind,
    CandidateStats,
    FeedbackKind,
    JSONValue,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
    StepKind,
    ensure_sequence,
    new_id,
    utcnow,
)
from memabra._signals import ExplicitSignals, FeedbackSignals, ImplicitSignals, ProgrammaticSignals

__all__ = [
    "COMPONENT_RANGES",
    "MAX_ID_LENGTH",
    "STOP_ID",
    "Budget",
    "USAGE_METADATA_KEYS",
    "Candidate",
    "CandidateKind",
    "CandidateStats",
    "Episode",
    "ExplicitSignals",
    "EpisodeSummary",
    "Feedback",
    "FeedbackReceipt",
    "FeedbackSignals",
    "GoldDecision",
    "LoggedDecision",
    "FeedbackKind",
    "ImplicitSignals",
    "JSONValue",
    "LearningItem",
    "MemoryQuality",
    "OPEResult",
    "Page",
    "ProgrammaticSignals",
    "PolicySnapshot",
    "RegistryItem",
    "RewardBreakdown",
    "RewardComponents",
    "RewardWeights",
    "RoutingContext",
    "ScoredCandidate",
    "Selection",
    "SlotDraw",
    "Step",
    "StepKind",
    "UsageCounts",
    "ensure_sequence",
    "new_id",
    "utcnow",
]
