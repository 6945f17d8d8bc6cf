"""The numpy learner's feature indices (:mod:`memabra.router._linear`): what one candidate pool,
one request over it (a design) and one slot of it contribute, each built once and reused by every
slot and fit that reads it.
"""

from __future__ import annotations

import io
import operator
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import SnapshotError
from memabra._records import STOP_ID, Candidate, CandidateKind, RoutingContext, SlotDraw
from memabra.router._features import HISTORY_FEATURES, NUMERIC_FEATURES, FeatureTable
from memabra.router._hashed_features import GROUPS, finish, left, mix, query_hashes, right, text_hashes, token_hash
from memabra.router._slots import SlotView

__all__ = [
    "BITS",
    "EMPTY_INDEX",
    "MAX_POSITION",
    "MAX_RANK",
    "Design",
    "Slot",
    "decode_weights",
    "encode_weights",
    "open_log",
    "rank_features",
    "rank_terms",
    "reachable_slots",
    "rows_chosen_before",
    "slot_key",
    "stop_numbers",
    "stop_rows",
]

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
MAX_POSITION = 4  # positions beyond the fifth pick share one stop feature
EMPTY_INDEX = np.zeros(0, dtype=np.int64)
_NO_VALUES = np.zeros(0)
MAX_RANK = 4  # open ranks beyond the fifth share one feature
_USERS_PER_POOL = 256  # user x candidate indices kept per pool (recomputing one costs ~0.1 ms)


@lru_cache(maxsize=1024)
def open_log(n: int) -> float:
    """The stop row's ``open_log`` for ``n`` open candidates (numpy's log1p, as it always was)."""
    return float(np.log1p(n))


@lru_cache(maxsize=64)
def slot_key(kind: CandidateKind, position: int) -> str:
    """A slot's kind and position as the rank and stop features name it."""
    return f"{kind.value}:{min(position, MAX_POSITION)}"


class Slot:
    """The weight-independent parts of one slot's rows (scoring, the stop row and the fits of a
    replayed slot all read them), built once per view."""

    __slots__ = ("best", "design", "key", "stop_index", "stop_values", "top", "top_rows", "view")

    def __init__(self, view: SlotView, design: Design, key: str, top_rows: list[int], best: float) -> None:
        self.view = view
        self.design = design
        self.key = key  # the slot's kind and position, as the rank and stop features name it
        self.top_rows = top_rows  # the first MAX_RANK open rows by similarity, in that order
        self.top = list(map(view.eligible.index, top_rows))  # and their options
        self.best = best
        self.stop_index: NDArray[np.int64] | None = None
        self.stop_values: NDArray[np.float64] = _NO_VALUES


@lru_cache(maxsize=64)
def _stop_key(slot: str) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
    """The ``s`` index of one slot kind and position and its share of the ``qs`` indices."""
    key = np.array([token_hash(slot)], dtype=np.uint64)
    return mix(GROUPS["s"], key, np.zeros(1, np.uint64), BITS), right(GROUPS["qs"], key)


@lru_cache(maxsize=64)
def _stop_keys(keys: tuple[str, ...]) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
    """:func:`_stop_key` of each of ``keys``, stacked: the ``s`` column and the ``qs`` shares."""
    parts = [_stop_key(key) for key in keys]
    return np.array([part[0][0] for part in parts]), np.array([part[1][0] for part in parts])[:, None]


@lru_cache(maxsize=64)
def reachable_slots(kinds: tuple[CandidateKind, ...], slots: tuple[int, ...]) -> tuple[str, ...]:
    """The :func:`slot_key` of every slot a request filling ``slots[i]`` slots of ``kinds[i]`` can reach."""
    return tuple(
        slot_key(kind, position)
        for kind, count in zip(kinds, slots, strict=True)
        for position in range(min(count, MAX_POSITION + 1))
    )


def stop_rows(q: NDArray[np.uint64], keys: tuple[str, ...]) -> dict[str, NDArray[np.int64]]:
    """The stop option's feature indices at each slot kind and position of ``keys`` for the query
    whose :func:`left` shares are ``q``."""
    slot_column, query_shares = _stop_keys(keys)
    rows = np.empty((len(keys), 1 + q.size + _STOP_NUMERIC_INDEX.size), dtype=np.int64)
    rows[:, 0] = slot_column
    rows[:, 1 : 1 + q.size] = finish(q[None, :] + query_shares, BITS)
    rows[:, 1 + q.size :] = _STOP_NUMERIC_INDEX
    return dict(zip(keys, rows, strict=True))


@lru_cache(maxsize=64)
def rank_features(slot: str) -> NDArray[np.int64]:
    """The ``kr`` indices of one slot kind and position, by open rank."""
    key = np.array([token_hash(slot)], dtype=np.uint64)
    return mix(GROUPS["kr"], key, np.arange(MAX_RANK + 1, dtype=np.uint64), BITS)


def rank_terms(rank_weights: list[float], order: list[int], rows: list[int]) -> NDArray[np.float64]:
    """Each of ``rows``' rank weight when ``order`` ranks them (the first :data:`MAX_RANK` by
    similarity have a weight each, the rest share the last)."""
    terms = np.full(len(rows), rank_weights[MAX_RANK])
    position = {row: i for i, row in enumerate(rows)}
    for rank, row in enumerate(order[:MAX_RANK]):
        terms[position[row]] = rank_weights[rank]
    return terms


def rows_chosen_before(
    context: RoutingContext, table: FeatureTable, draws: Sequence[SlotDraw]
) -> dict[CandidateKind, tuple[int, ...]]:
    """For each kind, the rows of ``table`` chosen in earlier kinds' slots of a decision: what its
    first slot saw as already chosen (the slot loop fills kinds in ``context.kinds`` order)."""
    row_of = {candidate.id: row for row, candidate in enumerate(table.candidates)}
    picks: dict[CandidateKind, list[int]] = {}
    for draw in draws:
        if draw.chosen_id != STOP_ID:
            picks.setdefault(draw.kind, []).append(row_of[draw.chosen_id])
    before: dict[CandidateKind, tuple[int, ...]] = {}
    earlier: list[int] = []
    for kind in context.kinds:
        before[kind] = tuple(earlier)
        earlier += picks.get(kind, ())
    return before


class _Pool:
    """What the features of a candidate pool need besides the request (hashes of ids and words),
    kept across decisions over the same pool."""

    __slots__ = ("a_index", "ca_part", "ids", "pairs", "present", "qa_part", "qw_part", "text", "users", "values")

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
        self.ca_part = right(GROUPS["ca"], self.ids)
        self.qw_part = right(GROUPS["qw"], self.text)[:, None, :]
        self.users: dict[str, NDArray[np.int64]] = {}
        self.values: dict[int, NDArray[np.float64]] = {}
        self.pairs: dict[int, NDArray[np.int64]] = {}

    def pair_index(self, chosen: int) -> NDArray[np.int64]:
        """The ``ca`` indices of every candidate once candidate ``chosen`` is chosen (at most one
        row of indices per candidate, so kept: every pick of every decision reads one)."""
        index = self.pairs.get(chosen)
        if index is None:
            index = self.pairs[chosen] = finish(left(self.ids[[chosen]]) + self.ca_part, BITS)
            index.flags.writeable = False
        return index

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


def _same_objects(a: tuple[Candidate, ...], b: tuple[Candidate, ...]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


class Design:
    """The slot-independent feature indices of one table's candidates under one request.

    ``previous``, the last decision's design, lends its pool when the candidates are the same
    objects (a serving process's registry): the pool cache's key costs ~10 µs to build."""

    __slots__ = (
        "_kind_orders",
        "hybrid",
        "index",
        "order",
        "pool",
        "q",
        "query",
        "stop",
        "table",
        "user",
        "values",
    )
    pool: _Pool

    def __init__(self, table: FeatureTable, query: str, user: str, previous: Design | None = None) -> None:
        self.table = table
        self.query = query
        self.user = user
        self.stop: dict[str, NDArray[np.int64]] = {}
        self.hybrid = table.column("hyb_z")
        # rows by descending similarity (first of equals first): restricted to a slot's open rows,
        # the order a stable argsort of theirs gives, so a slot's ranks are a short walk of it
        self.order: list[int] = np.argsort(-self.hybrid, kind="stable").tolist()
        self._kind_orders: dict[CandidateKind, tuple[list[int], frozenset[int]]] = {}
        if previous is not None and _same_objects(previous.table.candidates, table.candidates):
            pool = self.pool = previous.pool
        else:
            pool = self.pool = _pool(table.candidates)
        q = self.q = left(query_hashes(query))
        n, width = pool.text.shape
        users = pool.user_index(user)
        # the row layout: id, query x id, query x text, numeric, user x id and text; written in
        # place rather than concatenated (the numeric block would be a broadcast copy)
        qw_start = 1 + q.size
        numeric_start = qw_start + q.size * width
        users_start = numeric_start + _NUMERIC_INDEX.size
        index = self.index = np.empty((n, users_start + users.shape[1]), dtype=np.int64)
        index[:, :1] = pool.a_index
        index[:, 1:qw_start] = finish(q[None, :] + pool.qa_part, BITS)
        index[:, qw_start:numeric_start] = finish(q[None, :, None] + pool.qw_part, BITS).reshape(n, -1)
        index[:, numeric_start:users_start] = _NUMERIC_INDEX
        index[:, users_start:] = users
        self.values = pool.values_for(q.size).copy()
        self.values[:, numeric_start:users_start] = table.matrix[:, _NUMERIC_COLUMNS]

    def kind_order(self, kind: CandidateKind) -> tuple[list[int], frozenset[int]]:
        """The rows of ``kind`` in :attr:`order`, and as a set: every slot of the kind walks them for
        its ranks and the offer scores take the first ones."""
        found = self._kind_orders.get(kind)
        if found is None:
            candidates = self.table.candidates
            rows = [row for row in self.order if candidates[row].kind is kind]
            found = self._kind_orders[kind] = (rows, frozenset(rows))
        return found

    def stop_index(self, key: str, context: RoutingContext) -> NDArray[np.int64]:
        """The stop row's feature indices at the slot kind and position ``key`` for this request."""
        index = self.stop.get(key)
        if index is None:
            # every slot kind and position the request can reach, at once: one hashing pass per
            # decision instead of one per slot
            kinds = context.kinds
            keys = reachable_slots(kinds, tuple(map(context.budget.slots_for, kinds)))
            if key not in keys:
                keys += (key,)
            self.stop.update(stop_rows(self.q, keys))
            index = self.stop[key]
        return index


def stop_numbers(view: SlotView, best: float) -> tuple[float, float, float]:
    """The stop row's last three values (its others are 1): the share of the token budget left,
    ``best`` (the best open similarity) and the open candidates' count (as :func:`open_log`)."""
    budget = view.context.budget.max_tokens
    share = 1.0 if budget is None or view.remaining_tokens is None else view.remaining_tokens / max(budget, 1)
    return share, best, open_log(len(view.eligible))


def encode_weights(weights: NDArray[np.float64], squared_gradients: NDArray[np.float64]) -> bytes:
    """A snapshot's payload: the touched weights and squared gradients with their indices."""
    buffer = io.BytesIO()
    touched = np.flatnonzero((squared_gradients != 0.0) | (weights != 0.0))
    np.savez_compressed(buffer, index=touched, weights=weights[touched], squared_gradients=squared_gradients[touched])
    return buffer.getvalue()


def decode_weights(payload: bytes, size: int) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Inverse of :func:`encode_weights` for a model of ``size`` weights: ``(index, weights,
    squared_gradients)``; :class:`~memabra.SnapshotError` names what is wrong with a bad payload."""
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as data:
            index = data["index"]
            arrays: dict[str, Any] = {k: data[k] for k in ("weights", "squared_gradients")}
    except (ValueError, KeyError, OSError) as exc:
        raise SnapshotError(f"linear snapshot payload is unreadable: {exc}") from None
    if index.size and (index.min() < 0 or index.max() >= size):
        raise SnapshotError("linear snapshot indexes weights outside the model")
    if any(a.shape != index.shape or not np.all(np.isfinite(a)) for a in arrays.values()):
        raise SnapshotError("linear snapshot arrays are inconsistent or not finite")
    return index, arrays["weights"], arrays["squared_gradients"]
