"""Recall: the memories of one user worth showing the router for one query.

A pool the router can score whole (up to :data:`RECALL_ALL` memories) goes to it whole. A larger
one is cut to the :data:`RECALL_LIMIT` best by the hybrid prior the router itself starts from
(z-scored BM25 plus z-scored cosine similarity), over an index built once per pool version: an
inverted index of content words and a matrix of stored embeddings, so a query costs a few
posting-list sums and one matrix-vector product. ``memabra memories search`` ranks with it too.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from memabra._records import RegistryItem
from memabra._text import content_words
from memabra.router import CachingEncoder

__all__ = ["RECALL_ALL", "RECALL_LIMIT", "RecallIndex", "rank"]

logger = logging.getLogger("memabra")

# The router scores every candidate it is offered each slot; 64 memories keep a decision near a
# millisecond (benchmarks/router_latency.py), so smaller pools are not cut at all.
RECALL_ALL = 64
# What a larger pool is cut to: ten times the default memory slots, so a pick the router has
# learned to prefer below the prior's top five is still offered.
RECALL_LIMIT = 48
# An index is rebuilt after this long even if its version did not move: its items' usage
# counters age, and writes made around the memory API (EpisodeLog.put_items) do not move it.
INDEX_TTL_S = 300.0
# Indexes kept per process (one per user pool); older ones are rebuilt when asked for again.
_MAX_INDEXES = 256
_K1, _B = 1.5, 0.75


@dataclass(frozen=True)
class _Index:
    version: Hashable
    built: float
    items: tuple[RegistryItem, ...]
    # term -> (documents holding it, its BM25 term score in each): fixed for the pool, so a
    # query only sums the posting lists of its words
    postings: dict[str, tuple[NDArray[np.int64], NDArray[np.float64]]]
    vectors: NDArray[np.float32] | None

    def scores(self, query: str, q: NDArray[np.float32] | None) -> NDArray[np.float64]:
        """The hybrid prior of every item for ``query``, embedded as ``q`` (``None``: lexical only)."""
        lexical = np.zeros(len(self.items), dtype=np.float64)
        for term in content_words(query):
            hit = self.postings.get(term)
            if hit is not None:
                lexical[hit[0]] += hit[1]
        total = _z(lexical)
        if self.vectors is not None and q is not None:
            if not self.fits(q):  # an encoder whose width changes from call to call: the words still rank
                logger.warning(
                    "recall: the query's vector has %d dimensions, the memories' %d; ranked by words only",
                    q.shape[0],
                    self.vectors.shape[1],
                )
                return total
            # einsum, not BLAS: a threaded matrix-vector product on a busy host waits for its threads
            # (measured in docs/memory.md, "Measurements")
            total = total + _z(np.einsum("ij,j->i", self.vectors, q).astype(np.float64))
        return total

    def fits(self, q: NDArray[np.float32] | None) -> bool:
        """Whether the query's vector has the width of the items' (vacuously, where either is missing)."""
        return self.vectors is None or q is None or self.vectors.shape[1] == q.shape[0]


def _embedded(query: str, encoder: CachingEncoder | None) -> NDArray[np.float32] | None:
    """The query's vector: embedded before any index is built, so that an encoder whose width
    changed under its name (another model's rows stored under it) knows its width when the items
    are read, and embeds those rows again rather than stacking them."""
    return None if encoder is None else np.asarray(encoder.encode([query]), dtype=np.float32)[0]


def _z(x: NDArray[np.float64]) -> NDArray[np.float64]:
    sd = float(x.std())
    return (x - float(x.mean())) / sd if sd > 1e-12 else np.zeros_like(x)


def _build(
    version: Hashable, items: Sequence[RegistryItem], encoder: CachingEncoder | None, width: int | None = None
) -> _Index:
    postings: dict[str, tuple[list[int], list[float]]] = {}
    lengths = np.zeros(len(items), dtype=np.float64)
    for i, item in enumerate(items):
        words = content_words(item.text)
        lengths[i] = max(len(words), 1)
        for w in words:
            docs, tf = postings.setdefault(w, ([], []))
            docs.append(i)
            tf.append(1.0)
    norm = _K1 * (1.0 - _B + _B * lengths / max(float(lengths.mean()) if len(items) else 1.0, 1.0))
    vectors = None
    if encoder is not None and items:
        texts = [i.text for i in items]
        encoder.warm(texts)
        cached = encoder.cached(texts)
        wrong = [t for t, v in cached.items() if width is not None and v.shape[0] != width]
        if wrong:
            # kept from before the encoder's width changed (or read from another model's stored
            # rows): encode() embeds them again at the query's width
            cached.update(zip(wrong, np.asarray(encoder.encode(wrong), dtype=np.float32), strict=True))
        if len(cached) == len(set(texts)) and len({cached[t].shape[0] for t in texts}) == 1:
            vectors = np.stack([cached[t] for t in texts]).astype(np.float32)
    n = len(items)
    frozen: dict[str, tuple[NDArray[np.int64], NDArray[np.float64]]] = {}
    for word, (docs, counts) in postings.items():
        rows, freq = np.asarray(docs, dtype=np.int64), np.asarray(counts, dtype=np.float64)
        idf = math.log(1.0 + (n - len(rows) + 0.5) / (len(rows) + 0.5))
        frozen[word] = (rows, idf * freq * (_K1 + 1.0) / (freq + norm[rows]))
    return _Index(version, time.monotonic(), tuple(items), frozen, vectors)


def rank(items: Sequence[RegistryItem], query: str, encoder: CachingEncoder | None) -> list[tuple[RegistryItem, float]]:
    """``items`` best first for ``query`` by the hybrid prior, with their scores."""
    if not items:
        return []
    q = _embedded(query, encoder)
    index = _build(None, items, encoder, None if q is None else q.shape[0])
    scores = index.scores(query, q)
    order = np.argsort(-scores, kind="stable")
    return [(items[i], float(scores[i])) for i in order]


class RecallIndex:
    """Per-process indexes of user pools, rebuilt when the pool's version changes; thread-safe."""

    def __init__(self, encoder: CachingEncoder | None) -> None:
        self.encoder = encoder
        self._indexes: OrderedDict[Hashable, _Index] = OrderedDict()
        self._lock = threading.Lock()

    def top(
        self,
        key: Hashable,
        version: Hashable,
        load: Callable[[], Sequence[RegistryItem]],
        query: str,
        limit: int,
        *,
        small: int = 0,
    ) -> list[RegistryItem]:
        """The ``limit`` best items of the pool ``key`` for ``query``; ``load`` is called only when
        the pool is not indexed at ``version`` (or the index is older than ``INDEX_TTL_S``). A pool
        of at most ``small`` items is returned whole, freshly loaded, and not indexed."""
        now = time.monotonic()
        with self._lock:
            index = self._indexes.get(key)
            if index is not None and index.version == version and now - index.built < INDEX_TTL_S:
                self._indexes.move_to_end(key)
            else:
                index = None
        q = None
        if index is None:
            items = load()
            if len(items) <= small:
                return list(items)
            q = _embedded(query, self.encoder)
            index = self._built(key, version, items, q)
        if len(index.items) <= limit:
            return list(index.items)
        if q is None:
            q = _embedded(query, self.encoder)
        if not index.fits(q):
            # built before the encoder's width changed under its name (a model swapped, another
            # model's rows stored under it): the dot product would fail until the index aged out
            index = self._built(key, index.version, index.items, q)
        return [index.items[i] for i in _top(index.scores(query, q), limit)]

    def _built(
        self, key: Hashable, version: Hashable, items: Sequence[RegistryItem], q: NDArray[np.float32] | None
    ) -> _Index:
        index = _build(version, items, self.encoder, None if q is None else q.shape[0])
        with self._lock:
            self._indexes[key] = index
            self._indexes.move_to_end(key)
            while len(self._indexes) > _MAX_INDEXES:
                self._indexes.popitem(last=False)
        return index


def _top(scores: NDArray[np.float64], limit: int) -> NDArray[np.intp]:
    """The first ``limit`` of a stable descending sort of ``scores`` (ties: the earlier item), in
    that order, without sorting them all."""
    cut = scores[np.argpartition(-scores, limit - 1)[:limit]].min()
    above = np.flatnonzero(scores > cut)
    best = np.concatenate([above, np.flatnonzero(scores == cut)[: limit - above.size]])
    return best[np.lexsort((best, -scores[best]))]
