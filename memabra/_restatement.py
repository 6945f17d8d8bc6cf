"""When a new fact only restates a stored one, and when it negates one.

A restatement: the same polarity, and content-word sets that differ by at most one word and overlap
almost wholly. The memory write path refreshes the stored memory instead of adding a near-copy, and
a restore refuses to bring back a memory a current one restates.

A negation (:func:`contradicts`): the same words, the other polarity — "I don't live in Lyon
anymore" against "I live in Lyon", "I'm not vegetarian now" against "I'm vegetarian". It is no
restatement (refreshing "I'm vegetarian" into "I'm not vegetarian" would log a reversal as a
repeat); the write path retires the fact it negates instead.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

from memabra._text import content_words, overlap

__all__ = ["RestatementIndex", "contradicts", "is_negated", "is_restatement"]

# A restatement, not a new fact: content words overlap this much both ways, at most one differs.
_DEDUP_OVERLAP = 0.85

# A statement whose own verb is negated: "I don't / do not / never / no longer ...", "I'm not ...",
# "my dog isn't ...". A "not" elsewhere ("allergic to nuts, not shellfish") negates no statement.
_NEGATED = re.compile(
    r"\b(?:i|we)(?:'m|'re| am| are)?\s+(?:(?:really|actually|just|still)\s+)?"
    r"(?:do\s+not|don'?t|did\s+not|didn'?t|can\s*not|can'?t|won'?t|never|no\s+longer|not)\b"
    r"|\b(?:i|we)(?:'m|'re| am| are)\s+(?:not|no\s+longer|never)\b"
    r"|\b(?:my|our)\s+[\w' -]{1,40}?\s+(?:is|are|was|were|does|do)(?:\s+not|n'?t)\b"
    r"|\b(?:my|our)\s+[\w' -]{1,40}?\s+(?:isn'?t|aren'?t|doesn'?t|no\s+longer)\b",
    re.IGNORECASE,
)
# The words that only carry the negation ("not" and "no" are stop words already).
_NEGATION_WORDS = frozenset(
    "don't dont doesn't doesnt didn't didnt can't cant cannot won't wont isn't isnt aren't arent never "
    "longer anymore".split()
)


# Where the negated clause ends: "I'm not vegetarian anymore, my wife still is" negates only the first.
_CLAUSE_BREAK = re.compile(r"[,;.!?()]|\s(?:and|but|though|although|because|since|so|while|whereas)\s", re.I)


def is_negated(text: str) -> bool:
    """Whether ``text`` states its fact negated ("I don't live in Lyon", "I'm not vegetarian")."""
    return _NEGATED.search(text.replace("\u2019", "'")) is not None


@lru_cache(maxsize=65_536)
def _key(text: str) -> tuple[bool, frozenset[str]]:
    # remember() compares a new fact with every stored one: each stored text is analysed once.
    text = text.replace("\u2019", "'")
    if not text.isascii():  # composed, as memabra._memory_write.clean stores a fact: a memory stored
        text = unicodedata.normalize("NFC", text)  # decomposed before that is restated, not retired
    negation = _NEGATED.search(text)
    if negation is None:
        return False, content_words(text)
    # a negated statement is compared by its negated clause alone
    start = max((m.end() for m in _CLAUSE_BREAK.finditer(text, 0, negation.start())), default=0)
    end = next((m.start() for m in _CLAUSE_BREAK.finditer(text, negation.end())), len(text))
    return True, content_words(text[start:end]) - _NEGATION_WORDS


def _close(wa: frozenset[str], wb: frozenset[str]) -> bool:
    return bool(wa and wb) and len(wa ^ wb) <= 1 and overlap(wa, wb) >= _DEDUP_OVERLAP


def is_restatement(a: str, b: str) -> bool:
    (na, wa), (nb, wb) = _key(a), _key(b)
    return na == nb and _close(wa, wb)


def contradicts(a: str, b: str) -> bool:
    """Whether one of ``a`` and ``b`` negates the other: the same words, the other polarity."""
    (na, wa), (nb, wb) = _key(a), _key(b)
    return na != nb and _close(wa, wb)


class RestatementIndex:
    """Finds restatements among many texts in O(words) per text: two texts restate each other
    when they have the same polarity and their content-word sets differ by at most one word (see
    :func:`is_restatement`), so a set is looked up as it is, with one word less, and among the
    stored sets of its polarity with one word less. :meth:`negates` looks in the other polarity."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._exact: dict[bool, set[frozenset[str]]] = {False: set(), True: set()}
        self._minus_one: dict[bool, set[frozenset[str]]] = {False: set(), True: set()}
        for text in texts:
            self._insert(*_key(text))

    def _insert(self, negated: bool, words: frozenset[str]) -> None:
        self._exact[negated].add(words)
        self._minus_one[negated].update(words - {w} for w in words)

    def _found(self, negated: bool, words: frozenset[str]) -> bool:
        exact, minus_one = self._exact[negated], self._minus_one[negated]
        return bool(words) and (words in exact or words in minus_one or any(words - {w} in exact for w in words))

    def negates(self, text: str) -> bool:
        """Whether ``text`` negates a stored text (or a stored text negates it)."""
        negated, words = _key(text)
        return self._found(not negated, words)

    def add(self, text: str) -> bool:
        """Store ``text``'s words unless they restate a stored text; True when it was new."""
        negated, words = _key(text)
        if self._found(negated, words):
            return False
        self._insert(negated, words)
        return True
