"""Small text utilities shared by the runtime: token estimates and content-word overlap."""

from __future__ import annotations

import re

__all__ = ["approx_tokens", "content_words", "overlap"]

_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")
_STOP = frozenset(
    """a an the i me my mine you your yours it its is are was were be been being to of and or in on at
    for with that this these those what which who whom do does did can could would should will shall
    please so just as by from about into over than then there here have has had not no yes if but
    we our us they them their he she him her his hers am let know tell any some""".split()
)


def approx_tokens(text: str) -> int:
    """Context cost of ``text``: whitespace words x 1.3, rounded (the bench data's convention)."""
    return max(1, round(1.3 * len(text.split()))) if text.strip() else 0


def content_words(text: str) -> frozenset[str]:
    """Lower-cased words of ``text`` without stop words, the unit of every overlap test here."""
    return frozenset(w.strip("'-") for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1)


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Share of the smaller set found in the other (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))
