"""When a new fact only restates a stored one: their content-word sets differ by at most one word
and overlap almost wholly. The memory write path refreshes the stored memory instead of adding a
near-copy, and a restore refuses to bring back a memory a current one restates."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from memabra._text import content_words, overlap

__all__ = ["RestatementIndex", "is_restatement"]

# A restatement, not a new fact: content words overlap this much both ways, at most one differs.
_DEDUP_OVERLAP = 0.85


@lru_cache(maxsize=65_536)
def _words(text: str) -> frozenset[str]:
    # remember() compares a new fact with every stored one: each stored text is analysed once.
    return content_words(text)


def is_restatement(a: str, b: str) -> bool:
    wa, wb = _words(a), _words(b)
    return bool(wa and wb) and len(wa ^ wb) <= 1 and overlap(wa, wb) >= _DEDUP_OVERLAP


class RestatementIndex:
    """Finds restatements among many texts in O(words) per text: two texts restate each other
    when their content-word sets differ by at most one word (see :func:`is_restatement`), so a
    set is looked up as it is, with one word less, and among the stored sets with one word less."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._exact: set[frozenset[str]] = set()
        self._minus_one: set[frozenset[str]] = set()
        for text in texts:
            self._insert(_words(text))

    def _insert(self, words: frozenset[str]) -> None:
        self._exact.add(words)
        self._minus_one.update(words - {w} for w in words)

    def add(self, text: str) -> bool:
        """Store ``text``'s words unless they restate a stored text; True when it was new."""
        words = _words(text)
        if words and (
            words in self._exact or words in self._minus_one or any(words - {w} in self._exact for w in words)
        ):
            return False
        self._insert(words)
        return True
