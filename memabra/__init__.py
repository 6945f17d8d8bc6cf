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
    EpisodeSummary,
    Feedback,
    FeedbackKind,
    FeedbackReceipt,
    GoldDecision,
    JSONValue,
    LearningItem,
    MemoryQuality,
    OPEResult,
    Page,
    PolicySnapshot,
    RegistryItem,
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

# The runtime pulls in LangGraph; load it on first use so `import memabra` stays light.
_LAZY = {
    "create_memabra_agent": "memabra._agent",
    "build_session": "memabra._agent",
    "MemabraAgent": "memabra._agent",
    "MemabraContext": "memabra._agent",
    "MemabraState": "memabra._agent",
    "MemabraMiddleware": "memabra._middleware",
    "MemabraNodes": "memabra._middleware",
    "create_memabra_middleware": "memabra._middleware",
    "RoutingSession": "memabra._session",
    "Skill": "memabra._catalog",
    "load_skills": "memabra._catalog",
    "MemoryBackend": "memabra._memory",
    "SQLMemory": "memabra._memory",
    "StoreMemory": "memabra._memory",
    "LLMFactExtractor": "memabra._memory",
    "FactExtractor": "memabra._memory",
    "RuleFactExtractor": "memabra._memory",
    "extract_facts": "memabra._memory",
    "ExtractiveChatModel": "memabra._standin",
    "CompositeReward": "memabra._reward",
    "RewardConfig": "memabra._reward",
    "FEEDBACK_KEYS": "memabra._reward",
    "RewardService": "memabra._feedback",
    "load_reward_config": "memabra._config",
    "parse_weights": "memabra._config",
    "detect_correction": "memabra._corrections",
    "CorrectionSignal": "memabra._corrections",
    # The admin web app for embedding in another ASGI server (needs the admin extra).
    "create_admin_app": "memabra._admin:create_app",
}


def __getattr__(name: str) -> object:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'memabra' has no attribute {name!r}")
    import importlib

    module, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


__all__ = [
    "FEEDBACK_KEYS",
    "STOP_ID",
    "Budget",
    "Candidate",
    "CandidateKind",
    "CompositeReward",
    "ConfigError",
    "CorrectionSignal",
    "Episode",
    "EpisodeSummary",
    "ExtractiveChatModel",
    "FactExtractor",
    "Feedback",
    "FeedbackError",
    "FeedbackKind",
    "FeedbackReceipt",
    "GoldDecision",
    "InvalidRecordError",
    "JSONValue",
    "LLMFactExtractor",
    "LearningItem",
    "MemabraAgent",
    "MemabraContext",
    "MemabraError",
    "MemabraMiddleware",
    "MemabraNodes",
    "MemabraState",
    "MemoryBackend",
    "MemoryQuality",
    "OPEResult",
    "Page",
    "PolicySnapshot",
    "RegistryItem",
    "RewardBreakdown",
    "RewardComponents",
    "RewardConfig",
    "RewardService",
    "RewardWeights",
    "RouterError",
    "RoutingContext",
    "RoutingSession",
    "RuleFactExtractor",
    "SQLMemory",
    "SchemaError",
    "ScoredCandidate",
    "Selection",
    "Skill",
    "SlotDraw",
    "SnapshotError",
    "Step",
    "StepKind",
    "StoreMemory",
    "UnknownEpisodeError",
    "__version__",
    "build_session",
    "create_admin_app",
    "create_memabra_agent",
    "create_memabra_middleware",
    "detect_correction",
    "extract_facts",
    "load_reward_config",
    "load_skills",
    "parse_weights",
]
