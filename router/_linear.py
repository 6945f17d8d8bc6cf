"""The numpy learner: a linear residual model over hashed features that transfer between requests.

It shares the prior, exploration and update loop of :mod:`memabra.router._residual`. The residual
of a candidate is linear in (:mod:`memabra.router._hashed_features`):

* its identity (a learned bias: a tool nobody needs sinks for every request);
* query token × its identity (which words call for which tool, beyond their text);
* query token × its text tokens (a learned similarity: what it learns about one tool's words
  carries to tools and requests never seen);
* each candidate already chosen in this selection × its identity (co-needed tools: file moves need
  ``cd``, posts need the authentication tool);
* its usage history and token cost (numeric features; its similarity is in the prior);
* the user × its identity and its text tokens (what one user prefers, beyond what all need);
* the slot's position × its similarity rank among the open candidates (a second memory is worth
  less than a first: this, against the stop option, is how the router learns to inject fewer).

The stop option has features of its own, so *how many* is learned from the request: the slot's kind
and position (picks so far), query token × that position, the share of the token budget left and the
best open candidate's similarity.

Weights follow a normalised AdaGrad step on the squared error: per-feature step sizes
``1 / sqrt(sum of squared gradients)``, scaled so one example moves the prediction the fraction
``learning_rate`` of the way to its target (an example with many active features does not
overshoot).
"""

from __future__ import annotations

import io
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError, SnapshotError
from memabra._records import Candidate
from memabra.router._base import SlotView
from memabra.router._features import HISTORY_FEATURES, NUMERIC_FEATURES, FeatureTable
from memabra.router._hashed_features import GROUPS, finish, left, mix, query_hashes, right, text_hashes, token_hash
from memabra.router._residual import DEFAULT_EPSILON, DEFAULT_TOP_M, ResidualRouter
from memabra.router._similarity import Similarity

__all__ = ["LinearRouter"]

# 2 ** 20 weights (8 MiB): the multi-turn bench's query x text crosses fill about 1.5% of it
BITS = 20
# the candidate's usage history and cost; not its similarity, which the prior already carries: the
# candidates a learner sees outcomes for are the similar ones it chose, and weights fitted on them
# learned that similarity predicts an unused memory (measured in docs/router.md). The request-memory
# counts are no longer filled.
_NUMERIC = tuple(n for n in HISTORY_FEATURES if n not in ("failed_here", "helped_here"))
_NUMERIC_COLUMNS = np.array([NUMERIC_FEATURES.index(n) for n in _NUMERIC])
_NUMERIC_INDEX = mix(
    GROUPS["n"], np.array([token_hash(n) for n in _NUMERIC], dtype=np.uint64), np.zeros(1, np.uint64), BITS
)
_STOP_NUMERIC = ("budget_left", "best_open_hyb", "open_log")
_STOP_NUMERIC_INDEX = mix(
    GROUPS["sn"], np.array([token_hash(n) for n in _STOP_NUMERIC], dtype=np.uint64), np.zeros(1, np.uint64), BITS
)
_MAX_POSITION = 4  # positions beyond the fifth pick share one stop feature
_EMPTY_INDEX = np.zeros(0, dtype=np.int64)
_NO_VALUES = np.zeros(0)
_MAX_RANK = 4  # open ranks beyond the fifth share one feature
_USERS_PER_POOL = 256  # user x candidate indices kept per pool (recomputing one costs ~0.1 ms)


@lru_cache(maxsize=1024)
def _open_log(n: int) -> float:
    """The stop row's ``open_log`` for ``n`` open candidates (numpy's log1p, as it always was)."""
    return float(np.log1p(n))


class _Slot:
    """The weight-independent parts of one slot's rows (scoring, the stop row and the fits of a
    replayed slot all read them), built once per view."""

    __slots__ = ("best", "rank", "stop_index", "stop_values", "view")

    def __init__(self, view: SlotView, rank: NDArray[np.int64], best: float) -> None:
        self.view = view
        self.rank = rank
        self.best = best
        self.stop_index: NDArray[np.int64] | None = None
        self.stop_values: NDArray[np.float64] = _NO_VALUES


@lru_cache(maxsize=64)
def _rank_features(slot: str) -> NDArray[np.int64]:
    """The ``kr`` indices of one slot kind and position, by open rank."""
    key = np.array([token_hash(slot)], dtype=np.uint64)
    return mix(GROUPS["kr"], key, np.arange(_MAX_RANK + 1, dtype=np.uint64), BITS)


class _Pool:
    """What the features of a candidate pool need besides the request (hashes of ids and words),
    kept across decisions over the same pool."""

    __slots__ = ("a_index", "ids", "present", "qa_part", "qw_part", "text", "users", "values")

    def __init__(self, candidates: tuple[Candidate, ...]) -> None:
        n = len(candidates)
        self.ids = np.fromiter((token_hash(c.id) for c in candidates), dtype=np.uint64, count=n)
        words = [text_hashes(c.text) for c in candidates]
        width = max(max((w.size for w in words), default=0), 1)
        self.text = np.zeros((n, width), dtype=np.uint64)
        self.present = np.zeros((n, width))
        for i, w in enumerate(words):
            self.text[i, : w.size] = w
            self.present[i, : w.size] = 1.0
        self.a_index = mix(GROUPS["a"], self.ids[:, None], np.zeros((1, 1), np.uint64), BITS)
        self.qa_part = right(GROUPS["qa"], self.ids)[:, None]
        self.qw_part = right(GROUPS["qw"], self.text)[:, None, :]
        self.users: dict[str, NDArray[np.int64]] = {}
        self.values: dict[int, NDArray[np.float64]] = {}

    def values_for(self, query_tokens: int) -> NDArray[np.float64]:
        """The feature values of every candidate for a query of ``query_tokens`` distinct tokens,
        the numeric columns left 0 (a request's table fills them): only those differ between
        requests of the same length."""
        template = self.values.get(query_tokens)
        if template is None:
            n = self.ids.size
            present = self.present
            template = self.values[query_tokens] = np.concatenate(
                [
                    np.ones((n, 1 + query_tokens)),
                    np.broadcast_to(present[:, None, :], (n, query_tokens, present.shape[1])).reshape(n, -1),
                    np.zeros((n, _NUMERIC_COLUMNS.size)),
                    np.ones((n, 1)),
                    present,
                ],
                axis=1,
            )
            template.flags.writeable = False
        return template

    def user_index(self, user: str) -> NDArray[np.int64]:
        """The ``ua`` and ``uw`` indices of every candidate for ``user``."""
        index = self.users.get(user)
        if index is None:
            u = left(np.array([token_hash(user)], dtype=np.uint64))
            ua = finish(u[None, :] + right(GROUPS["ua"], self.ids)[:, None], BITS)
            uw = finish(u[None, :] + right(GROUPS["uw"], self.text), BITS)
            index = self.users[user] = np.concatenate([ua, uw], axis=1)
            while len(self.users) > _USERS_PER_POOL:
                del self.users[next(iter(self.users))]
        return index


_POOLS: dict[tuple[tuple[str, str], ...], _Pool] = {}
_MAX_POOLS = 64  # candidate pools whose hashes are kept (a pool is a user's memories or a registry)


def _pool(candidates: tuple[Candidate, ...]) -> _Pool:
    key = tuple((c.id, c.text) for c in candidates)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = _Pool(candidates)
        while len(_POOLS) > _MAX_POOLS:
            del _POOLS[next(iter(_POOLS))]
    return pool


class _Design:
    """The slot-independent feature indices of one table's candidates under one request."""

    __slots__ = ("hybrid", "ids", "index", "order", "query", "stop", "table", "user", "values")

    def __init__(self, table: FeatureTable, query: str, user: str) -> None:
        self.table = table
        self.query = query
        self.user = user
        self.stop: dict[str, NDArray[np.int64]] = {}
        self.hybrid = table.column("hyb_z")
        # rows by descending similarity (first of equals first): restricted to a slot's open rows,
        # the order a stable argsort of theirs gives, so a slot's ranks are a short walk of it
        self.order: list[int] = np.argsort(-self.hybrid, kind="stable").tolist()
        pool = _pool(table.candidates)
        q = left(query_hashes(query))
        self.ids = pool.ids
        n = pool.ids.size
        qw = finish(q[None, :, None] + pool.qw_part, BITS).reshape(n, -1)
        self.index = np.concatenate(
            [
                pool.a_index,
                finish(q[None, :] + pool.qa_part, BITS),
                qw,
                np.broadcast_to(_NUMERIC_INDEX, (n, _NUMERIC_INDEX.size)),
                pool.user_index(user),
            ],
            axis=1,
        )
        self.values = pool.values_for(q.size).copy()
        start = 1 + q.size + qw.shape[1]
        self.values[:, start : start + _NUMERIC_COLUMNS.size] = table.matrix[:, _NUMERIC_COLUMNS]


class LinearRouter(ResidualRouter):
    """Linear residual learner on hashed features (see the module docstring).

    learning_rate
        Share of the error one example removes (in ``(0, 1]``).
    exploration, epsilon, top_m
        As for every learner (:class:`~memabra.router.ResidualRouter`).
    """

    name = "linear"

    # Deliberate repeat (ResidualRouter, LinearRouter, VWRouter): each learner spells out its whole
    # signature, sklearn-style, so help() and parameter introspection show every knob and default.
    def __init__(
        self,
        *,
        learning_rate: float = 0.5,
        exploration: str = "epsilon",
        epsilon: float = DEFAULT_EPSILON,
        top_m: int = DEFAULT_TOP_M,
        seed: int = 0,
        min_probability: float = 1e-5,
        recall_limit: int | None = 50,
        similarity: Similarity | None = None,
    ) -> None:
        super().__init__(
            exploration=exploration,
            epsilon=epsilon,
            top_m=top_m,
            seed=seed,
            min_probability=min_probability,
            recall_limit=recall_limit,
            similarity=similarity,
        )
        self.learning_rate = learning_rate

    def _check_params(self) -> None:
        super()._check_params()
        rate = self.learning_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
            raise RouterError(f"learning_rate must lie in (0, 1], got {rate!r}")

    def _init_model(self) -> None:
        super()._init_model()
        self._weights = np.zeros(1 << BITS)
        self._squared_gradients = np.zeros(1 << BITS)
        self._design: _Design | None = None
        self._base_scores: NDArray[np.float64] | None = None
        self._pair_scores: dict[tuple[int, ...], NDArray[np.float64]] = {}
        self._slot: _Slot | None = None

    # ------------------------------------------------------------------------- features
    def _design_of(self, view: SlotView) -> _Design:
        design = self._design
        context = view.context
        if (
            design is None
            or design.table is not view.table
            or (design.query, design.user) != (context.query, context.user_id)
        ):
            design = self._design = _Design(view.table, context.query, context.user_id)
            self._base_scores = None
            self._pair_scores = {}
        return design

    def _pair_index(self, design: _Design, chosen: int, rows: NDArray[np.intp] | list[int]) -> NDArray[np.int64]:
        return mix(GROUPS["ca"], design.ids[[chosen]], design.ids[rows], BITS)

    def _slot_of(self, view: SlotView) -> _Slot:
        """The cached parts of ``view``'s rows (the cache holds the view, so its id is not reused)."""
        slot = self._slot
        if slot is not None and slot.view is view:
            return slot
        design = self._design_of(view)
        # the kr feature of each open candidate: slot position x its open similarity rank; ranks
        # from _MAX_RANK on share one feature, so only the first _MAX_RANK open rows are looked for
        features = _rank_features(f"{view.kind.value}:{min(view.position, _MAX_POSITION)}")
        option_of = {row: option for option, row in enumerate(view.eligible)}
        top: list[int] = []
        for row in design.order:
            option = option_of.get(row)
            if option is not None:
                top.append(option)
                if len(top) == _MAX_RANK:
                    break
        rank = np.full(len(view.eligible), features[_MAX_RANK], dtype=np.int64)
        rank[top] = features[: len(top)]
        # the best open similarity is the first-ranked open row's (the maximum itself, not a sum)
        best = float(design.hybrid[view.eligible[top[0]]]) if top else 0.0
        slot = self._slot = _Slot(view, rank, best)
        return slot

    def _stop_row(self, view: SlotView) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        slot = self._slot_of(view)
        if slot.stop_index is not None:
            return slot.stop_index, slot.stop_values
        design = self._design_of(view)
        key = f"{view.kind.value}:{min(view.position, _MAX_POSITION)}"
        index = design.stop.get(key)
        if index is None:
            code = np.array([token_hash(key)], dtype=np.uint64)
            q = query_hashes(view.context.query)
            index = design.stop[key] = np.concatenate(
                [
                    mix(GROUPS["s"], code, np.zeros(1, np.uint64), BITS),
                    mix(GROUPS["qs"], q, code, BITS),
                    _STOP_NUMERIC_INDEX,
                ]
            )
        budget = view.context.budget.max_tokens
        share = 1.0 if budget is None or view.remaining_tokens is None else view.remaining_tokens / max(budget, 1)
        values = np.ones(index.size)
        values[-3:] = (share, slot.best, _open_log(len(view.eligible)))
        values.flags.writeable = False
        slot.stop_index, slot.stop_values = index, values
        return index, values

    def _candidate_row(self, view: SlotView, option: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        design = self._design_of(view)
        row = view.eligible[option]
        pairs = (
            np.concatenate([self._pair_index(design, c, [row]) for c in view.chosen]) if view.chosen else _EMPTY_INDEX
        )
        rank = self._slot_of(view).rank[option : option + 1]
        return (
            np.concatenate([design.index[row], pairs, rank]),
            np.concatenate([design.values[row], np.ones(pairs.size + 1)]),
        )

    # ------------------------------------------------------------------------- the model
    def _pair_scores_for(self, design: _Design, chosen: tuple[int, ...]) -> NDArray[np.float64]:
        """What the candidates already chosen add to every row's score (built one pick at a time)."""
        cached = self._pair_scores.get(chosen)
        if cached is not None:
            return cached
        n = design.ids.size
        parent = self._pair_scores_for(design, chosen[:-1]) if len(chosen) > 1 else np.zeros(n)
        scores = parent + self._weights[self._pair_index(design, chosen[-1], np.arange(n))]
        self._pair_scores[chosen] = scores
        return scores

    def _open_residuals(self, view: SlotView) -> NDArray[np.float64]:
        """The open candidates' residuals (the stop option's left out)."""
        design = self._design_of(view)
        if self._base_scores is None:
            self._base_scores = np.einsum("ij,ij->i", self._weights[design.index], design.values)
        rows = view.rows
        out = self._base_scores[rows]
        if view.chosen:
            out += self._pair_scores_for(design, view.chosen)[rows]
        out += self._weights[self._slot_of(view).rank]
        return out

    def _residuals(self, view: SlotView) -> NDArray[np.float64]:
        out = np.empty(view.n_options)
        out[:-1] = self._open_residuals(view)
        index, values = self._stop_row(view)
        out[-1] = float(self._weights[index] @ values)
        return out

    def _candidate_costs(self, view: SlotView) -> NDArray[np.float64]:
        # the logged scores need no stop option: its row is the part of a slot's scoring skipped
        costs: NDArray[np.float64] = self._prior_cost(view)[:-1] + self._open_residuals(view)
        return costs

    def _begin_update(self) -> None:
        self._base_scores = None
        self._pair_scores = {}

    def _fit(self, view: SlotView, option: int, target: float) -> None:
        if option < len(view.eligible):
            index, values = self._candidate_row(view, option)
        else:
            index, values = self._stop_row(view)
        self._base_scores = None
        self._pair_scores = {}
        keep = values != 0.0
        index, inverse = np.unique(index[keep], return_inverse=True)
        if index.size == 0:
            return
        value = np.bincount(inverse, weights=values[keep], minlength=index.size)
        error = float(self._weights[index] @ value) - target
        self._squared_gradients[index] += (error * value) ** 2
        direction = value / np.sqrt(self._squared_gradients[index] + 1e-12)
        reach = float(direction @ value)
        if reach <= 0.0:
            return
        self._weights[index] -= float(self.learning_rate) * error * direction / reach

    # ------------------------------------------------------------------------- snapshots
    def _model_bytes(self) -> bytes:
        buffer = io.BytesIO()
        touched = np.flatnonzero((self._squared_gradients != 0.0) | (self._weights != 0.0))
        np.savez_compressed(
            buffer, index=touched, weights=self._weights[touched], squared_gradients=self._squared_gradients[touched]
        )
        return buffer.getvalue()

    def _load_model(self, payload: bytes) -> None:
        try:
            with np.load(io.BytesIO(payload), allow_pickle=False) as data:
                index = data["index"]
                arrays: dict[str, Any] = {k: data[k] for k in ("weights", "squared_gradients")}
        except (ValueError, KeyError, OSError) as exc:
            raise SnapshotError(f"linear snapshot payload is unreadable: {exc}") from None
        if index.size and (index.min() < 0 or index.max() >= self._weights.size):
            raise SnapshotError("linear snapshot indexes weights outside the model")
        if any(a.shape != index.shape or not np.all(np.isfinite(a)) for a in arrays.values()):
            raise SnapshotError("linear snapshot arrays are inconsistent or not finite")
        self._weights[index] = arrays["weights"]
        self._squared_gradients[index] = arrays["squared_gradients"]
        self._design = None
        self._base_scores = None
        self._pair_scores = {}
