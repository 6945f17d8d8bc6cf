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

# The runtime pulls in LangGraph; load it on first use so `import memabra` stays light.
_LAZY = {
    "create_memabra_agent": "memabra._agent",
    "build_session": "memabra._build",
    "SessionSettings": "memabra._settings",
    "MemabraAgent": "memabra._agent",
    "MemabraContext": "memabra._agent",
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
    "extract_facts": "memabra._memory",
    "ExtractiveChatModel": "memabra._standin",
    "CompositeReward": "memabra._reward",
    "RewardConfig": "memabra._reward",
    "FEEDBACK_KEYS": "memabra._reward",
    "RewardService": "memabra._feedback",
    "load_reward_config": "memabra._config",
    "parse_weights": "memabra._config",
    "detect_correction": "memabra._corrections",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memabra' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
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
    "Episode",
    "ExtractiveChatModel",
    "Feedback",
    "FeedbackError",
    "FeedbackKind",
    "InvalidRecordError",
    "LLMFactExtractor",
    "MemabraAgent",
    "MemabraContext",
    "MemabraError",
    "MemabraMiddleware",
    "MemabraNodes",
    "MemoryBackend",
    "PolicySnapshot",
    "RewardBreakdown",
    "RewardComponents",
    "RewardConfig",
    "RewardService",
    "RewardWeights",
    "RouterError",
    "RoutingContext",
    "RoutingSession",
    "SQLMemory",
    "SchemaError",
    "SessionSettings",
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
    "create_memabra_agent",
    "create_memabra_middleware",
    "detect_correction",
    "extract_facts",
    "load_reward_config",
    "load_skills",
    "parse_weights",
]
