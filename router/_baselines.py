"""Fixed rankers to measure learners against: similarity top-k (lexical, semantic, hybrid) --
what mem0, LangGraph's store and bigtool do -- plus uniform random and a fixed priority list.

Baselines fill every slot the budget allows (they never stop early). Each slot puts all its mass
on one option (the best remaining, or a uniform draw for :class:`RandomRouter`); give them
``min_probability > 0`` to log with support for offline evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from memabra._errors import ConfigError, RouterError
from memabra._records import RoutingContext
from memabra.router._base import Router, SlotView
from memabra.router._features import FeatureTable
from memabra.router._similarity import EMBEDDINGS_EXTRA_HINT, Similarity, embeddings_available

__all__ = ["EmbeddingRouter", "FixedListRouter", "HybridRouter", "LexicalRouter", "RandomRouter"]


def _one_hot_best(view: SlotView, scores: NDArray[np.float64]) -> NDArray[np.float64]:
    eligible = np.asarray(view.eligible, dtype=int)
    best = int(np.argmax(scores[eligible]))  # first of equals: the earlier-offered candidate
    out = np.zeros(view.n_options)
    out[best] = 1.0
    return out


class _TopK(Router):
    column: ClassVar[str] = "hyb_z"

    def _scores(self, context: RoutingContext, table: FeatureTable) -> NDArray[np.float64]:
        return table.column(self.column)

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        return _one_hot_best(view, view.table.column(self.column))


class HybridRouter(_TopK):
    """Top-k by ``lex_z + sem_z``: the sum of z-normalised BM25 and embedding scores (BM25 alone
    without the embeddings extra)."""

    name = "hybrid"
    column = "hyb_z"


class LexicalRouter(_TopK):
    """Top-k by BM25."""

    name = "bm25"
    column = "lex"


class EmbeddingRouter(_TopK):
    """Top-k by embedding cosine; needs the ``embeddings`` extra (or an injected encoder)."""

    name = "embedding"
    column = "sem"

    def _ensure_state(self) -> None:
        if not self._ready and self.similarity is None and not embeddings_available():
            raise ConfigError(f"the embedding baseline needs sentence-transformers: {EMBEDDINGS_EXTRA_HINT}")
        if not self._ready and self.similarity is not None and not self.similarity.has_semantic:
            raise ConfigError("the embedding baseline needs a Similarity with an encoder")
        super()._ensure_state()


class RandomRouter(Router):
    """Fills every slot uniformly at random among the eligible candidates."""

    name = "random"

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        out = np.zeros(view.n_options)
        out[:-1] = 1.0 / len(view.eligible)
        return out

    def _scores(self, context: RoutingContext, table: FeatureTable) -> NDArray[np.float64]:
        return np.zeros(len(table.candidates))


class FixedListRouter(Router):
    """Fills slots in a fixed priority order: the ids of ``order`` first, in that order, then the
    rest as offered."""

    name = "fixed"

    def __init__(
        self,
        order: Sequence[str] = (),
        *,
        seed: int = 0,
        min_probability: float = 0.0,
        recall_limit: int | None = None,
        similarity: Similarity | None = None,
        unused_penalty: float = 0.3,
        max_pending: int = 100_000,
    ) -> None:
        super().__init__(
            seed=seed,
            min_probability=min_probability,
            recall_limit=recall_limit,
            similarity=similarity,
            unused_penalty=unused_penalty,
            max_pending=max_pending,
        )
        self.order = tuple(order)

    def _check_params(self) -> None:
        super()._check_params()
        if isinstance(self.order, str) or not all(isinstance(i, str) for i in self.order):
            raise RouterError("FixedListRouter.order must be a sequence of candidate ids")

    def _scores(self, context: RoutingContext, table: FeatureTable) -> NDArray[np.float64]:
        priority = {cid: len(self.order) - i for i, cid in enumerate(self.order)}
        return np.array([float(priority.get(c.id, 0)) for c in table.candidates])

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        return _one_hot_best(view, self._scores(view.context, view.table))
