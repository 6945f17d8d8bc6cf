"""What every MemPO scoring path shares: the prompt layout, the answer-probability record and the
interface of anything that computes it (the transformers-backed :class:`MemPOScorer` or a stand-in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from memabra._errors import InvalidRecordError

__all__ = [
    "ANSWER_OPEN",
    "AnswerProbabilities",
    "AnswerScorer",
    "UnscorablePairError",
    "format_context",
    "memory_block",
]

ANSWER_OPEN = "<answer>"
"""Every context ends with the answer tag, so the gold answer is scored in the answer format."""


def memory_block(memory_texts: Sequence[str]) -> str:
    """Memory texts as one ``<mem>…</mem>`` block, one text a line (an empty block for none)."""
    if isinstance(memory_texts, str):
        raise TypeError("memory_texts must be a sequence of strings, not a single string")
    return "\n".join(["<mem>", *memory_texts, "</mem>"])


def format_context(question: str, body: str) -> str:
    """The context the gold answer is scored after: the question, the body, the answer tag."""
    return f"{question}\n{body}\n{ANSWER_OPEN}"


@dataclass(frozen=True, slots=True, eq=False)
class AnswerProbabilities:
    """Per (context, answer) pair: ``probabilities`` = exp(mean log p(answer tokens | context)),
    the geometric mean of the answer tokens' probabilities; ``answer_tokens`` the number of answer
    tokens scored; ``sequence_tokens`` the length of the pair's sequence as run through the model
    (context, after any cut, and answer; padding excluded; a pair repeated in one call is run once
    but counts each time). All three have shape (n_pairs,)."""

    probabilities: np.ndarray
    answer_tokens: np.ndarray
    sequence_tokens: np.ndarray

    def __post_init__(self) -> None:
        shapes = {self.probabilities.shape, self.answer_tokens.shape, self.sequence_tokens.shape}
        if len(shapes) != 1 or self.probabilities.ndim != 1:
            raise ValueError(f"AnswerProbabilities arrays must share one 1-D shape, got {sorted(shapes)}")

    def __len__(self) -> int:
        return len(self.probabilities)


@runtime_checkable
class AnswerScorer(Protocol):
    """Computes the probability of each answer after its context."""

    def answer_probabilities(self, contexts: Sequence[str], answers: Sequence[str]) -> AnswerProbabilities: ...


class UnscorablePairError(InvalidRecordError):
    """A (context, answer) pair a scorer cannot score (an answer with no tokens, or longer than the
    model); ``index`` is the pair's position in the call, so a caller can name its own record."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
