"""Helpers for the memory tests: a real, deterministic encoder and a store embed function."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


class HashingEncoder:
    """A real, deterministic encoder: hashed bag of words, L2-normalised; counts what it embeds."""

    name = "hashing-64"

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0
        self.texts = 0

    def encode(self, texts) -> NDArray[np.float32]:  # type: ignore[no-untyped-def]
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace(".", " ").split():
                out[i, hash_word(w) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)


def hash_word(word: str) -> int:
    return int.from_bytes(word.encode()[:8].ljust(8, b"_"), "little") * 2654435761 % (2**31)


def hashing_embed(texts: list[str]) -> list[list[float]]:
    """An embed function for a LangGraph store index, from the same deterministic encoder."""
    return HashingEncoder().encode(texts).tolist()
