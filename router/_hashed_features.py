"""Hashed feature indices for the numpy learner, built with array arithmetic rather than strings.

Every token and id is hashed once (CRC-32, stable across processes, so snapshots stay valid); a
feature crossing two of them gets the index ``mix(group, h1, h2)`` in a ``2 ** bits`` weight vector.
The groups (see :mod:`memabra.router._linear` for why each is there):

========  ==============================================================================
``a``     candidate id (a learned bias per candidate)
``qa``    query token × candidate id
``qw``    query token × candidate text token
``ca``    candidate already chosen in this selection × candidate id (co-needed tools)
``ua``    user × candidate id; ``uw`` user × candidate text token (a user's own preferences)
``kr``    the slot's kind and position × the candidate's rank among the open ones by similarity
``n``     a numeric feature of the candidate (its value, by feature name)
``s``     stop option × the slot's kind and position (how many picks so far)
``qs``    query token × the stop option at the slot's kind and position
``sn``    a numeric feature of the stop option (budget left, the best open similarity)
========  ==============================================================================
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from memabra.router._text import analyze

__all__ = ["GROUPS", "TEXT_TOKENS", "finish", "left", "mix", "query_hashes", "right", "text_hashes", "token_hash"]

# the first words of a tool or memory text carry its name and purpose; more add cost, not signal
TEXT_TOKENS = 24
GROUPS = {name: i + 1 for i, name in enumerate(("a", "qa", "qw", "ca", "n", "s", "qs", "sn", "ua", "uw", "kr"))}

_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)
_SALTS = {g: np.uint64((g * 0x165667B19E3779F9) % 2**64) for g in range(1, 16)}
_SHIFT = np.uint64(31)


@lru_cache(maxsize=1 << 17)
def token_hash(token: str) -> int:
    """A stable 32-bit hash of ``token``."""
    return zlib.crc32(token.encode("utf-8"))


def _hashes(tokens: Sequence[str]) -> NDArray[np.uint64]:
    return np.fromiter((token_hash(t) for t in tokens), dtype=np.uint64, count=len(tokens))


@lru_cache(maxsize=8192)
def query_hashes(query: str) -> NDArray[np.uint64]:
    """Hashes of the query's distinct analysed tokens (read-only)."""
    out = _hashes(tuple(dict.fromkeys(analyze(query))))
    out.flags.writeable = False
    return out


@lru_cache(maxsize=1 << 16)
def text_hashes(text: str) -> NDArray[np.uint64]:
    """Hashes of the first :data:`TEXT_TOKENS` distinct analysed tokens of a candidate's text."""
    out = _hashes(tuple(dict.fromkeys(analyze(text)))[:TEXT_TOKENS])
    out.flags.writeable = False
    return out


def left(first: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The first operand's share of :func:`mix` (precomputable)."""
    return np.asarray(first, dtype=np.uint64) * _K1


def right(group: int, second: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The second operand's and the group's share of :func:`mix` (precomputable)."""
    return np.asarray(second, dtype=np.uint64) * _K2 + _SALTS[group]


def finish(x: NDArray[np.uint64], bits: int) -> NDArray[np.int64]:
    """Indices from summed shares: ``finish(left(a) + right(g, b)) == mix(g, a, b)``."""
    x = x ^ (x >> _SHIFT)  # a new array: the caller's shares stay as they were
    x *= _K1
    x >>= np.uint64(64 - bits)
    # below 2 ** bits, so the same numbers as int64 without copying them
    return x.view(np.int64)


def mix(group: int, first: NDArray[np.uint64], second: NDArray[np.uint64], bits: int) -> NDArray[np.int64]:
    """Indices in ``[0, 2 ** bits)`` of the features crossing ``first`` with ``second`` (broadcast)."""
    # array arithmetic wraps modulo 2 ** 64 (scalar arithmetic would warn)
    return finish(left(first) + right(group, second), bits)
