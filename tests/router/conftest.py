"""Fixtures for router tests: a lexical-only similarity and a tiny deterministic encoder, so the
suite needs neither the embedding model nor its load time (one test exercises the real model)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from memabra.router import Similarity
from memabra.router._text import analyze


class HashingEncoder:
    """Bag-of-words vectors hashed into 64 dimensions and L2-normalised; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            for token in analyze(text):
                out[i, sum(map(ord, token)) % 64] += 1.0
            norm = np.linalg.norm(out[i])
            out[i] = out[i] / norm if norm else out[i]
        return out


@pytest.fixture
def lexical() -> Similarity:
    return Similarity()


@pytest.fixture
def hashing_similarity() -> Similarity:
    return Similarity(encoder=HashingEncoder())
