"""One vector per distinct text, computed once: the encoder seam and its cache.

Stored vectors are keyed by the encoder's ``name``. The bundled encoder's name changes with its
model's files (router/_model_folder.py), but an encoder of the user's own keeps whatever name it
has (its class name when it has none), so stored vectors may come from a model it no longer
runs. Those of another width are caught here: they are never mixed with the encoder's own,
which a dot product would refuse mid-turn; they are embedded again, and the backing is left
alone for the rest of the process, with one warning saying how to give the encoder a name of its own.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

__all__ = ["CachingEncoder", "Encoder", "VectorBacking"]

_log = logging.getLogger("memabra")


@runtime_checkable
class Encoder(Protocol):
    """Turns texts into L2-normalised vectors, one row per text."""

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


@runtime_checkable
class VectorBacking(Protocol):
    """Where vectors outlive the process: ``load`` returns the stored ones among ``texts``."""

    def load(self, model: str, texts: Sequence[str]) -> dict[str, NDArray[np.float32]]: ...

    def save(self, model: str, vectors: dict[str, NDArray[np.float32]]) -> None: ...


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
        # the wrapped encoder's width, once it has computed a vector in this process
        self._width: int | None = None
        # set once the backing held another model's vectors under this encoder's name
        self._backing_stale = False
        # the encoder name the cached vectors were made under: a model whose files changed while it
        # loaded renames itself (SentenceTransformerEncoder), and what was cached before is another's
        self._named: str | None = None

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
            backing = None if self._backing_stale else self.backing
        if not missing:
            return 0
        name = self.name
        found = backing.load(name, missing) if backing is not None else {}
        todo = [t for t in missing if t not in found]
        fresh = self._compute(todo) if todo else {}
        if found and self.name != name:
            # the model loaded while this ran was not the one named when the rows were read
            fresh.update(self._compute(list(found)))
            todo += list(found)
            found = {}
        stale = [t for t, v in found.items() if self._width is not None and v.shape[0] != self._width]
        if stale:
            self._distrust(backing, {found[t].shape[0] for t in stale})
            backing = None
            for text in stale:
                del found[text]
            fresh.update(self._compute(stale))
            todo += stale
        elif found and len({v.shape[0] for v in found.values()}) > 1:
            # stored rows of two widths and nothing computed to tell which is this model's
            self._distrust(backing, {v.shape[0] for v in found.values()})
            backing = None
            fresh.update(self._compute(list(found)))
            todo += list(found)
            found = {}
        name = self.name
        if fresh and backing is not None:
            backing.save(name, {t: fresh[t] for t in todo if t in fresh})
        self._keep({**found, **fresh}, name)
        return len(todo)

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = list(texts)
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            fresh = self._compute(missing)
            self._keep(fresh, self.name)
        with self._lock:
            width, backing = self._width, (None if self._backing_stale else self.backing)
            wrong = {t: v.shape[0] for t in texts if (v := self._cache.get(t)) is not None and v.shape[0] != width}
        if wrong and width is not None:
            # another model's stored vectors, read before this process knew its encoder's width
            self._distrust(backing, set(wrong.values()))
            self._keep(self._compute(list(wrong)), self.name)
        with self._lock:
            width = self._width
            rows = []
            for text in texts:
                vector = self._cache.get(text)
                # evicted between the locks by a concurrent caller, or cached by a warm that read
                # another model's stored row before this process knew its width and kept it after
                # this call's check above (_keep refuses such a row once the width is known)
                if vector is None or (width is not None and vector.shape[0] != width):
                    vector = np.asarray(self.encoder.encode([text]), dtype=np.float32)[0]
                else:
                    self._cache.move_to_end(text)
                rows.append(vector)
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)

    def _compute(self, texts: list[str]) -> dict[str, NDArray[np.float32]]:
        vectors = np.asarray(self.encoder.encode(texts), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"encoder returned shape {vectors.shape} for {len(texts)} texts")
        with self._lock:
            self._width = int(vectors.shape[1])
        return dict(zip(texts, vectors, strict=True))

    def _keep(self, vectors: dict[str, NDArray[np.float32]], name: str) -> None:
        """Cache ``vectors``, made under the encoder name ``name``; rows of a width other than the
        encoder's are not kept (a concurrent warm may hold another model's, read before the width was known)."""
        with self._lock:
            if name != self._named:
                self._cache.clear()
                self._named = name
            for text, vector in vectors.items():
                if self._width is not None and vector.shape[0] != self._width:
                    continue
                self._cache[text] = vector
                self._cache.move_to_end(text)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)

    def _distrust(self, backing: VectorBacking | None, widths: set[int]) -> None:
        with self._lock:
            if self._backing_stale:
                return
            self._backing_stale = True
            for text in [t for t, v in self._cache.items() if v.shape[0] != self._width]:
                del self._cache[text]
        if backing is not None:
            _log.warning(
                "vectors stored under the encoder name %r are %s-dimensional, but the encoder makes "
                "%s-dimensional ones: another model was stored under the same name. This process embeds "
                "its candidates again and stores none; give the encoder a `name` of its own that changes "
                "with its model (docs/configuration.md, 'Changing the embedding model')",
                self.name,
                "/".join(str(w) for w in sorted(widths)),
                self._width,
            )


def _quiet_call(load: object) -> None:
    try:
        load()  # type: ignore[operator]
    except Exception:  # the first encode() raises it again, where the caller can see it
        _log.warning("loading the sentence-transformers model in the background failed", exc_info=True)
