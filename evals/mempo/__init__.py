"""MemPO scoring (shared/specs/mempo_scorer.md): the rule-based outcome reward, GRPO outcome and
memory advantages, and a model-based scorer that grades ``<mem>`` blocks and routing decisions by
P(gold | compressed context) against P(gold | full context).

Everything here but :class:`MemPOScorer` is plain Python and NumPy. :class:`MemPOScorer` needs the
``mempo`` extra (torch, transformers) and is imported on first access, so importing this package
never loads torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memabra.evals.mempo._advantage import (
    final_advantage,
    find_mem_spans,
    grpo_memory_advantage,
    grpo_outcome_advantage,
    memory_reward,
)
from memabra.evals.mempo._decisions import (
    RoutingDecisionItem,
    RoutingDecisionScore,
    ScoringProgress,
    routing_contexts,
    score_routing_decisions,
)
from memabra.evals.mempo._probability import (
    ANSWER_OPEN,
    AnswerProbabilities,
    AnswerScorer,
    UnscorablePairError,
    format_context,
    memory_block,
)
from memabra.evals.mempo._rules import (
    FormatRule,
    compute_score,
    em_check,
    extract_solution,
    format_violations,
    normalize_answer,
    split_turns,
    validate_format,
)
from memabra.evals.mempo._trajectory import (
    MemoryBlockScore,
    MemoryProbe,
    Trajectory,
    memory_probes,
    score_memory_blocks,
)

if TYPE_CHECKING:
    from memabra.evals.mempo._scorer import MemPOScorer, ScorerOutOfMemoryError

__all__ = [
    "ANSWER_OPEN",
    "AnswerProbabilities",
    "AnswerScorer",
    "FormatRule",
    "MemPOScorer",
    "MemoryBlockScore",
    "MemoryProbe",
    "RoutingDecisionItem",
    "RoutingDecisionScore",
    "ScorerOutOfMemoryError",
    "ScoringProgress",
    "Trajectory",
    "UnscorablePairError",
    "compute_score",
    "em_check",
    "extract_solution",
    "final_advantage",
    "find_mem_spans",
    "format_context",
    "format_violations",
    "grpo_memory_advantage",
    "grpo_outcome_advantage",
    "memory_block",
    "memory_probes",
    "memory_reward",
    "normalize_answer",
    "routing_contexts",
    "score_memory_blocks",
    "score_routing_decisions",
    "split_turns",
    "validate_format",
]


def __getattr__(name: str) -> Any:
    if name in ("MemPOScorer", "ScorerOutOfMemoryError"):
        try:
            from memabra.evals.mempo import _scorer
        except ImportError as exc:
            raise ImportError(f"{name} needs the mempo extra (pip install 'memabra[mempo]'): {exc}") from exc
        return getattr(_scorer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
