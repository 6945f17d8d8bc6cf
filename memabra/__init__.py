"""memabra: a contextual-bandit router for a LangGraph agent's memories, skills and tools."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memabra._errors import (
    ConfigError,
    FeedbackError,
    InvalidFeedbackError,
    InvalidRecordError,
    LogChangedError,
    MemabraError,
    MemoriesChangedError,
    RouterError,
    SchemaError,
    SnapshotError,
    StorageContentionError,
    UnknownEpisodeError,
    UnknownSnapshotError,
)
from memabra._records import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    CandidateStats,
    Episode,
    EpisodeSummary,
    Feedback,
    FeedbackKind,
    FeedbackReceipt,
    GoldDecision,
    JSONValue,
    LearningItem,
    LoggedDecision,
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
    UsageCounts,
)

__version__ = "0.1.0"

# The runtime pulls in LangGraph; load it on first use so `import memabra` stays light.
_LAZY = {
    "create_memabra_agent": "memabra._agent",
    "build_session": "memabra._build",
    "SessionSettings": "memabra._settings",
    "MemabraAgent": "memabra._agent",
    "MemabraContext": "memabra._agent",
    "MemabraState": "memabra._agent",
    "MemabraMiddleware": "memabra._middleware",
    "MemabraMiddlewareState": "memabra._middleware",
    "MemabraNodes": "memabra._middleware",
    "create_memabra_middleware": "memabra._middleware",
    "RoutingSession": "memabra._session",
    "Skill": "memabra._catalog",
    "load_skills": "memabra._catalog",
    "MemoryBackend": "memabra._memory",
    # The contracts a memory backend must keep (docs/memory.md, "Your own memory backend").
    "check_memory_backend": "memabra._memory_conformance",
    # An exported episode file (``episodes show --json``, the admin's "Download JSON") read back.
    "episode_from_document": "memabra._episode_file",
    "SQLMemory": "memabra._sql_memory",
    "StoreMemory": "memabra._store_memory",
    "MemoryRecord": "memabra._memory_records",
    "MemoryChange": "memabra._memory_records",
    "MemoryStatus": "memabra._memory_records",
    "MemoryAction": "memabra._memory_records",
    # What a supersession= argument implements, and the turn a RoutingSession hands out.
    "Supersession": "memabra._memory",
    "Turn": "memabra._turns",
    "RecalledMemory": "memabra._memory",
    "RestoredMemory": "memabra._memory_restore",
    "MemabraNodeState": "memabra._middleware",
    "memory_text": "memabra._store_memory",
    "LLMFactExtractor": "memabra._memory",
    "FactExtractor": "memabra._memory",
    "RuleFactExtractor": "memabra._memory",
    "extract_facts": "memabra._memory",
    "ExtractiveChatModel": "memabra._standin",
    # A chat model that says what a test scripted and records what it was sent (docs/configuration.md).
    "ScriptedChatModel": "memabra._standin",
    "ScriptedCall": "memabra._standin",
    "CompositeReward": "memabra._reward",
    "RewardConfig": "memabra._reward",
    "FEEDBACK_KEYS": "memabra._reward",
    "RewardService": "memabra._feedback",
    "load_reward_config": "memabra._config",
    "parse_weights": "memabra._config",
    "detect_correction": "memabra._corrections",
    "CorrectionSignal": "memabra._corrections",
    # Is every reward on its way to a learner? (for a service's own health endpoint)
    "health_problems": "memabra._health",
    "erase_user": "memabra._erasure",
    "Erasure": "memabra._erasure",
    "HealthProblem": "memabra._health",
    # The admin web app for embedding in another ASGI server (needs the admin extra).
    "create_admin_app": "memabra._admin:create_app",
    "AttemptThrottle": "memabra._admin._auth",
    # End users' feedback over HTTP, for a chat UI (needs Starlette: the admin extra, FastAPI or
    # LangGraph's Agent Server bring it).
    "feedback_app": "memabra._feedback_http",
    "agent_server_user": "memabra._feedback_http",
    "END_USER_FEEDBACK_KEYS": "memabra._feedback_http",
    "SessionRevocations": "memabra._admin._auth",
    # The typed feedback record.
    "FeedbackSignals": "memabra._signals",
    "ExplicitSignals": "memabra._signals",
    "ImplicitSignals": "memabra._signals",
    "ProgrammaticSignals": "memabra._signals",
}


# What a type checker sees for the lazy names above: the objects themselves, not the ``object`` that
# ``__getattr__`` returns (a client's ``mypy --strict`` would call ``create_memabra_agent`` "object
# not callable"). Never run; tests/packaging/test_public_surface.py keeps it in step with _LAZY.
if TYPE_CHECKING:
    from memabra._admin import create_app as create_admin_app
    from memabra._admin._auth import AttemptThrottle, SessionRevocations
    from memabra._agent import MemabraAgent, MemabraContext, MemabraState, create_memabra_agent
    from memabra._build import build_session
    from memabra._catalog import Skill, load_skills
    from memabra._config import load_reward_config, parse_weights
    from memabra._corrections import CorrectionSignal, detect_correction
    from memabra._episode_file import episode_from_document
    from memabra._erasure import Erasure, erase_user
    from memabra._feedback import RewardService
    from memabra._feedback_http import END_USER_FEEDBACK_KEYS, agent_server_user, feedback_app
    from memabra._health import HealthProblem, health_problems
    from memabra._memory import (
        FactExtractor,
        LLMFactExtractor,
        MemoryBackend,
        RecalledMemory,
        RuleFactExtractor,
        Supersession,
        extract_facts,
    )
    from memabra._memory_conformance import check_memory_backend
    from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus
    from memabra._memory_restore import RestoredMemory
    from memabra._middleware import (
        MemabraMiddleware,
        MemabraMiddlewareState,
        MemabraNodes,
        MemabraNodeState,
        create_memabra_middleware,
    )
    from memabra._reward import FEEDBACK_KEYS, CompositeReward, RewardConfig
    from memabra._session import RoutingSession
    from memabra._settings import SessionSettings
    from memabra._signals import ExplicitSignals, FeedbackSignals, ImplicitSignals, ProgrammaticSignals
    from memabra._sql_memory import SQLMemory
    from memabra._standin import ExtractiveChatModel, ScriptedCall, ScriptedChatModel
    from memabra._store_memory import StoreMemory, memory_text
    from memabra._turns import Turn


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
    "END_USER_FEEDBACK_KEYS",
    "FEEDBACK_KEYS",
    "STOP_ID",
    "Budget",
    "Candidate",
    "CandidateKind",
    "CandidateStats",
    "CompositeReward",
    "ConfigError",
    "CorrectionSignal",
    "Episode",
    "EpisodeSummary",
    "Erasure",
    "ExtractiveChatModel",
    "FactExtractor",
    "Feedback",
    "FeedbackError",
    "FeedbackKind",
    "FeedbackReceipt",
    "HealthProblem",
    "GoldDecision",
    "LoggedDecision",
    "InvalidRecordError",
    "JSONValue",
    "LLMFactExtractor",
    "LearningItem",
    "MemabraAgent",
    "MemabraContext",
    "MemabraError",
    "MemabraMiddleware",
    "MemabraMiddlewareState",
    "MemabraNodeState",
    "MemabraNodes",
    "MemabraState",
    "MemoryAction",
    "MemoryBackend",
    "MemoryChange",
    "MemoryQuality",
    "MemoryRecord",
    "MemoryStatus",
    "OPEResult",
    "Page",
    "PolicySnapshot",
    "RecalledMemory",
    "RestoredMemory",
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
    "AttemptThrottle",
    "SessionRevocations",
    "Supersession",
    "Turn",
    "SchemaError",
    "ScriptedCall",
    "ScriptedChatModel",
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
    "ExplicitSignals",
    "FeedbackSignals",
    "ImplicitSignals",
    "InvalidFeedbackError",
    "ProgrammaticSignals",
    "StorageContentionError",
    "LogChangedError",
    "MemoriesChangedError",
    "UnknownSnapshotError",
    "UsageCounts",
    "build_session",
    "check_memory_backend",
    "create_admin_app",
    "create_memabra_agent",
    "create_memabra_middleware",
    "detect_correction",
    "episode_from_document",
    "erase_user",
    "extract_facts",
    "agent_server_user",
    "feedback_app",
    "health_problems",
    "load_reward_config",
    "load_skills",
    "memory_text",
    "parse_weights",
]
