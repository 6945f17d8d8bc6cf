"""Review of stored vectors keyed by the model: a model folder replaced while a process loads it
does not store the new model's vectors under the old one's name, and a width change met by two
concurrent callers does not crash a turn stacking rows of both widths.

The sentence-transformers models are built in the test (see test_embedding_model_change.py).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from memory_helpers import HashingEncoder
from numpy.typing import NDArray
from tiny_sentence_model import build_tiny_model

from memabra.router import CachingEncoder, SentenceTransformerEncoder, Similarity
from memabra.storage import EmbeddingTable, EpisodeLog

TEXTS = ["my dog is called rex", "i am vegetarian", "i collect stamps from peru"]
QUERY = "dog called"


def _build_model(folder: Path, width: int, seed: int) -> Path:
    """A sentence-transformers model saved to ``folder`` (overwriting what is there)."""
    return build_tiny_model(folder, (w for t in (*TEXTS, QUERY) for w in t.split()), width=width, seed=seed)


def _replace_while_loading(monkeypatch: pytest.MonkeyPatch, folder: Path, new: Path) -> None:
    """The first model load finds ``new`` renamed into ``folder``'s place (a deploy swapping the
    folder whole while a process starts: after it hashed the files, before it read them)."""
    from memabra.router import _similarity

    real = _similarity._load_quietly
    swapped: list[bool] = []

    def load(path: str, device: str) -> object:
        if not swapped:
            swapped.append(True)
            os.rename(folder, folder.with_name("retired"))
            os.rename(new, folder)
        return real(path, device)

    monkeypatch.setattr(_similarity, "_load_quietly", load)


def test_a_folder_renamed_into_place_while_the_model_loads_stores_under_the_loaded_models_name(
    log: EpisodeLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _build_model(tmp_path / "live" / "encoder", width=8, seed=0)
    new = _build_model(tmp_path / "staged" / "encoder", width=8, seed=1)
    old_name = SentenceTransformerEncoder(str(folder)).name
    new_name = SentenceTransformerEncoder(str(new)).name
    encoder = SentenceTransformerEncoder(str(folder))
    assert encoder.name == old_name  # as the agent's build reads it, before the model loads
    _replace_while_loading(monkeypatch, folder, new)
    serving = CachingEncoder(encoder, backing=EmbeddingTable(log.engine))
    with caplog.at_level(logging.WARNING, logger="memabra"):
        assert serving.warm(TEXTS) == len(TEXTS)
    assert serving.name == new_name
    table = EmbeddingTable(log.engine)
    assert table.load(old_name, TEXTS) == {}  # the new weights' vectors would have poisoned the old name
    assert set(table.load(new_name, TEXTS)) == set(TEXTS)
    assert np.allclose(serving.encode(TEXTS), SentenceTransformerEncoder(str(folder)).encode(TEXTS), atol=1e-5)
    assert "changed while its model loaded" in caplog.text


def test_vectors_read_under_the_name_before_the_load_are_not_compared_with_the_loaded_model(
    log: EpisodeLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _build_model(tmp_path / "live" / "encoder", width=8, seed=0)
    new = _build_model(tmp_path / "staged" / "encoder", width=8, seed=1)
    # another process serving the old model stored its vectors
    CachingEncoder(SentenceTransformerEncoder(str(folder)), backing=EmbeddingTable(log.engine)).warm(TEXTS)
    serving = CachingEncoder(SentenceTransformerEncoder(str(folder)), backing=EmbeddingTable(log.engine))
    assert serving.warm(TEXTS) == 0  # read back under the old name, the model not loaded yet
    _replace_while_loading(monkeypatch, folder, new)
    scores = Similarity(encoder=serving).semantic(QUERY, TEXTS)  # the query's embedding loads the new model
    loaded = SentenceTransformerEncoder(str(folder))
    vectors = loaded.encode([QUERY, *TEXTS])
    assert np.allclose(scores, vectors[1:] @ vectors[0], atol=1e-5)


class _Narrow(HashingEncoder):
    """The new model, under the name the old (64-wide) one stored its vectors with."""

    name = "my-encoder"

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.on_encode: list[Any] = []

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        for hook in self.on_encode:
            hook(list(texts))
        return super().encode(texts)


class _PausedRows(dict[str, NDArray[np.float32]]):
    """Rows a concurrent warm read from the log: its width check goes over them, then it pauses
    before caching them, until ``go`` is set."""

    def __init__(self, rows: dict[str, NDArray[np.float32]], checked: threading.Event, go: threading.Event) -> None:
        super().__init__(rows)
        self.checked, self.go, self.paused = checked, go, False

    def items(self) -> Iterator[tuple[str, NDArray[np.float32]]]:  # type: ignore[override]
        yield from super().items()
        if not self.paused:
            self.paused = True
            self.checked.set()
            assert self.go.wait(10)


class _Gate:
    def __init__(self, table: EmbeddingTable) -> None:
        self.table, self.checked, self.go, self.paused = table, threading.Event(), threading.Event(), False

    def load(self, model: str, texts: Sequence[str]) -> dict[str, NDArray[np.float32]]:
        rows = self.table.load(model, texts)
        if self.paused:
            return _PausedRows(rows, self.checked, self.go)
        return rows

    def save(self, model: str, vectors: dict[str, NDArray[np.float32]]) -> None:
        self.table.save(model, vectors)


def test_a_concurrent_warm_caching_the_old_width_after_the_check_does_not_crash_a_turn(log: EpisodeLog) -> None:
    table = EmbeddingTable(log.engine)
    old = HashingEncoder(dim=64)
    old.name = "my-encoder"  # type: ignore[misc]
    CachingEncoder(old, backing=table).warm(TEXTS)
    narrow, gate = _Narrow(), _Gate(table)
    serving = CachingEncoder(narrow, backing=gate)
    serving.warm(TEXTS[:1])  # one stored row cached before this process knows its width
    gate.paused = True
    done = threading.Event()
    # turn A warms its pool: it reads the old rows and checks them while the width is unknown
    other = threading.Thread(target=lambda: (serving.warm(TEXTS[1:2]), done.set()), daemon=True)
    other.start()
    assert gate.checked.wait(10)

    def let_a_cache(texts: list[str]) -> None:
        if texts == TEXTS[:1]:  # turn B re-embeds the stale row it found: A caches its rows now
            gate.go.set()
            assert done.wait(10)

    narrow.on_encode.append(let_a_cache)
    # turn B: used to raise ValueError stacking a 64-wide row among 32-wide ones
    vectors = serving.encode([QUERY, *TEXTS[:2]])
    assert vectors.shape == (3, 32)
    assert np.allclose(vectors, _Narrow().encode([QUERY, *TEXTS[:2]]))
    assert serving.encode(TEXTS[1:2]).shape == (1, 32)
    other.join(10)
