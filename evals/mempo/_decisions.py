"""MemPO applied to routing decisions: P(gold | the memories the router selected) against
P(gold | every candidate memory), a memory-quality label for a logged decision whose gold answer
is known. Storage-free: records in, records out, in chunks, with a progress hook."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from memabra._errors import InvalidRecordError
from memabra.evals.mempo._advantage import memory_reward
from memabra.evals.mempo._probability import AnswerScorer, UnscorablePairError, format_context, memory_block

__all__ = [
    "RoutingDecisionItem",
    "RoutingDecisionScore",
    "ScoringProgress",
    "routing_contexts",
    "score_routing_decisions",
]


@dataclass(frozen=True, slots=True)
class RoutingDecisionItem:
    """A routing decision to grade: its id, the question, the texts of the memories it selected,
    the texts of every candidate memory it was offered (the selected ones included) and the gold
    answer (from programmatic acceptance or feedback)."""

    id: str
    question: str
    selected: tuple[str, ...]
    candidates: tuple[str, ...]
    gold_answer: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidRecordError(f"RoutingDecisionItem.id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.question, str):
            raise InvalidRecordError(f"RoutingDecisionItem.question must be a string (id {self.id!r})")
        for name in ("selected", "candidates"):
            texts = getattr(self, name)
            if isinstance(texts, str) or not isinstance(texts, Sequence):
                raise InvalidRecordError(f"RoutingDecisionItem.{name} must be a sequence of strings (id {self.id!r})")
            if not all(isinstance(text, str) for text in texts):
                raise InvalidRecordError(f"RoutingDecisionItem.{name} must hold strings only (id {self.id!r})")
            object.__setattr__(self, name, tuple(texts))
        if not isinstance(self.gold_answer, str) or not self.gold_answer.strip():
            raise InvalidRecordError(f"RoutingDecisionItem.gold_answer must be a non-empty string (id {self.id!r})")


@dataclass(frozen=True, slots=True)
class RoutingDecisionScore:
    """The grade of one decision: ``difference = p_selected - p_all``; ``reward`` +1 when the
    selection predicts the gold answer as well as every candidate did (``p_selected >= p_all -
    eps``), else -1; ``answer_tokens`` gold tokens scored per context; ``tokens`` tokens run through
    the model for both contexts."""

    id: str
    p_selected: float
    p_all: float
    difference: float
    reward: int
    answer_tokens: int
    tokens: int


@dataclass(frozen=True, slots=True)
class ScoringProgress:
    """Where a scoring run stands after a chunk; ``items_total`` is None for an unsized input."""

    items_done: int
    items_total: int | None
    tokens_done: int
    elapsed_s: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_done / self.elapsed_s if self.elapsed_s > 0 else 0.0


def routing_contexts(item: RoutingDecisionItem) -> tuple[str, str]:
    """The (selected, all candidates) contexts of a decision, each memory set as one ``<mem>`` block."""
    return (
        format_context(item.question, memory_block(item.selected)),
        format_context(item.question, memory_block(item.candidates)),
    )


def score_routing_decisions(
    scorer: AnswerScorer,
    items: Iterable[RoutingDecisionItem],
    *,
    eps: float = 0.0,
    chunk_size: int = 256,
    on_progress: Callable[[ScoringProgress], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    on_unscorable: Callable[[RoutingDecisionItem, str], None] | None = None,
) -> Iterator[tuple[RoutingDecisionScore, ...]]:
    """Grade decisions lazily, ``chunk_size`` items (2 * chunk_size sequences) per call to the
    scorer, yielding each chunk's scores in input order and reporting progress after each.

    A larger chunk lets the scorer bucket sequences of similar length together; the scorer's own
    batch size bounds what goes through the model at once.

    A decision the scorer cannot score (a gold answer longer than the model, or with no tokens)
    raises an :class:`InvalidRecordError` naming it; with ``on_unscorable`` it is handed to that
    (with the reason) and left out of its chunk instead, and the rest of the chunk is scored: one
    such decision does not stop every decision after it from being graded, run after run.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    total = len(items) if isinstance(items, Sequence) else None
    return _chunks(scorer, iter(items), total, float(eps), chunk_size, on_progress, clock, on_unscorable)


def _chunks(
    scorer: AnswerScorer,
    items: Iterator[RoutingDecisionItem],
    total: int | None,
    eps: float,
    chunk_size: int,
    on_progress: Callable[[ScoringProgress], None] | None,
    clock: Callable[[], float],
    on_unscorable: Callable[[RoutingDecisionItem, str], None] | None,
) -> Iterator[tuple[RoutingDecisionScore, ...]]:
    started = clock()
    done = 0
    tokens = 0
    while chunk := list(islice(items, chunk_size)):
        scores = (
            _score_chunk(scorer, chunk, eps) if on_unscorable is None else _skipping(scorer, chunk, eps, on_unscorable)
        )
        done += len(chunk)
        tokens += sum(score.tokens for score in scores)
        if on_progress is not None:
            on_progress(
                ScoringProgress(items_done=done, items_total=total, tokens_done=tokens, elapsed_s=clock() - started)
            )
        yield scores


def _skipping(
    scorer: AnswerScorer,
    chunk: list[RoutingDecisionItem],
    eps: float,
    on_unscorable: Callable[[RoutingDecisionItem, str], None],
) -> tuple[RoutingDecisionScore, ...]:
    """The chunk's scores without the decisions the scorer cannot score, each handed to
    ``on_unscorable``. A scorer refuses a pair while encoding it, before any forward pass, so
    taking one out and trying again costs a tokenisation of the chunk."""
    chunk = list(chunk)
    while chunk:
        try:
            return _score_chunk(scorer, chunk, eps)
        except _Unscorable as exc:
            on_unscorable(chunk.pop(exc.position), str(exc))
    return ()


class _Unscorable(InvalidRecordError):
    """A decision of a chunk the scorer cannot score: ``position`` is its place in the chunk."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position


def _score_chunk(
    scorer: AnswerScorer, chunk: list[RoutingDecisionItem], eps: float
) -> tuple[RoutingDecisionScore, ...]:
    for item in chunk:
        if not isinstance(item, RoutingDecisionItem):
            raise TypeError(f"items must be RoutingDecisionItem records, got {type(item).__name__}")
    contexts = [routing_contexts(item) for item in chunk]
    golds = [item.gold_answer for item in chunk]
    count = len(chunk)
    try:
        scored = scorer.answer_probabilities([c[0] for c in contexts] + [c[1] for c in contexts], golds + golds)
    except UnscorablePairError as exc:  # "answers[k] ...": name the decision, not the pair
        if not 0 <= exc.index < 2 * count:
            raise
        raise _Unscorable(exc.index % count, f"decision {chunk[exc.index % count].id!r}: {exc}") from None
    p_selected, p_all = scored.probabilities[:count], scored.probabilities[count:]
    rewards = memory_reward(p_selected, p_all, eps=eps)
    return tuple(
        RoutingDecisionScore(
            id=item.id,
            p_selected=float(p_selected[i]),
            p_all=float(p_all[i]),
            difference=float(p_selected[i] - p_all[i]),
            reward=int(rewards[i]),
            answer_tokens=int(scored.answer_tokens[i]),
            tokens=int(scored.sequence_tokens[i] + scored.sequence_tokens[count + i]),
        )
        for i, item in enumerate(chunk)
    )
