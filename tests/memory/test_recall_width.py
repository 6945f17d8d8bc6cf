"""Recall over a pool too large to offer whole (more than ``RECALL_ALL`` memories) when an encoder
of one's own changes width under one name (a model swapped, another model's rows stored under its
name). The pool's index was built (its vectors stacked) before the query was embedded, so the
query's width was learned only at the dot product, which raised mid-turn, and went on raising
on every turn until the index was rebuilt (its version moved, or five minutes passed). Now the
query is embedded first, and an index whose vectors are of another width is rebuilt."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from memory_helpers import HashingEncoder
from numpy.typing import NDArray

from memabra import SQLMemory
from memabra._recall import RECALL_LIMIT, RecallIndex, rank
from memabra._records import CandidateKind, RegistryItem, utcnow
from memabra.router import CachingEncoder
from memabra.storage import EpisodeLog

_TEXTS = [f"My colleague number {i} is called Person{i}" for i in range(100)] + ["My dog is called Rex"]


def _items() -> list[RegistryItem]:
    now = utcnow()
    return [RegistryItem(CandidateKind.MEMORY, f"m{i}", "ann", t, 8, created_at=now) for i, t in enumerate(_TEXTS)]


class _Stored:
    """A vector backing holding another model's (8-wide) rows under the encoder's name."""

    def __init__(self, width: int) -> None:
        rng = np.random.default_rng(0)
        self.rows = {t: rng.standard_normal(width).astype(np.float32) for t in _TEXTS}

    def load(self, model: str, texts: Sequence[str]) -> dict[str, NDArray[np.float32]]:
        return {t: self.rows[t] for t in texts if t in self.rows}

    def save(self, model: str, vectors: dict[str, NDArray[np.float32]]) -> None:
        pass


def test_a_pool_whose_stored_vectors_are_of_another_width_is_recalled() -> None:
    encoder = CachingEncoder(HashingEncoder(dim=64), backing=_Stored(8))
    found = RecallIndex(encoder).top("ann", 1, _items, "what is my dog called?", RECALL_LIMIT)
    assert len(found) == RECALL_LIMIT and found[0].text == "My dog is called Rex"


def test_rank_over_stored_vectors_of_another_width() -> None:
    encoder = CachingEncoder(HashingEncoder(dim=64), backing=_Stored(8))
    ranked = rank(_items(), "what is my dog called?", encoder)
    assert ranked[0][0].text == "My dog is called Rex"


def test_an_index_built_before_the_encoders_width_changed_is_rebuilt() -> None:
    model = HashingEncoder(dim=32)
    index = RecallIndex(CachingEncoder(model))
    assert len(index.top("ann", 1, _items, "my dog", RECALL_LIMIT)) == RECALL_LIMIT
    model.dim = 64  # the same encoder, under the same name, now another model's width
    found = index.top("ann", 1, _items, "what is my dog called?", RECALL_LIMIT)
    assert len(found) == RECALL_LIMIT and found[0].text == "My dog is called Rex"


def test_a_memory_backends_recall_goes_on_after_its_encoder_is_swapped(log: EpisodeLog) -> None:
    memory = SQLMemory(log, encoder=CachingEncoder(HashingEncoder(dim=32)))
    memory.remember_many("ann", _TEXTS)
    assert len(memory.recall("ann", "my dog")) == RECALL_LIMIT
    memory.encoder = CachingEncoder(HashingEncoder(dim=64))  # same name, hashing-64: another width
    found = memory.recall("ann", "what is my dog called?")
    assert len(found) == RECALL_LIMIT and "My dog is called Rex" in {i.text for i in found}
