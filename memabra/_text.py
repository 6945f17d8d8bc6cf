"""Small text utilities shared by the runtime: token estimates and content-word overlap.

Both read any script: words are Unicode words, and Chinese, Japanese and Korean text, written
without spaces, counts a token per character and compares as overlapping character pairs (the
router's tokeniser, :mod:`memabra.router._text`, does the same). English text gives exactly what
it gave before, so stored token counts and usage verdicts of English logs do not move.
"""

from __future__ import annotations

import re

from memabra.router._text import CJK_CHARACTER, cjk_pairs, fold

__all__ = ["approx_tokens", "content_words", "overlap"]

# A word starts with a letter or digit and may hold apostrophes and hyphens ("don't", "gluten-free");
# a run of CJK characters is matched on its own, to be cut into pairs.
_CJK_RUN = f"{CJK_CHARACTER.pattern}+"
_LETTER = f"(?:(?!{CJK_CHARACTER.pattern})[^\\W_])"
_WORD = re.compile(f"{_CJK_RUN}|{_LETTER}(?:{_LETTER}|['\\-])*")
_STOP = frozenset(
    """a an the i me my mine you your yours it its is are was were be been being to of and or in on at
    for with that this these those what which who whom do does did can could would should will shall
    please so just as by from about into over than then there here have has had not no yes if but
    we our us they them their he she him her his hers am let know tell any some""".split()
)


def approx_tokens(text: str) -> int:
    """Context cost of ``text``: whitespace words x 1.3 (the bench data's convention), plus one
    token per CJK character, which a model's tokeniser splits about that finely (a sentence of
    Chinese is one whitespace word)."""
    if not text.strip():
        return 0
    if not text.isascii():
        text = fold(text)  # half-width katakana ("ｶﾞｲﾄﾞ") count as the full-width characters they are
    cjk = len(CJK_CHARACTER.findall(text))
    if cjk:
        text = CJK_CHARACTER.sub(" ", text)
    return max(1, round(1.3 * len(text.split()) + cjk))


def content_words(text: str) -> frozenset[str]:
    """Case-folded words of ``text`` without stop words, CJK runs as character pairs: the unit of
    every overlap test here."""
    words: set[str] = set()
    # phones type a right single quote for the apostrophe
    for word in _WORD.findall(fold(text.replace("\u2019", "'"))):
        if CJK_CHARACTER.match(word):
            words.update(cjk_pairs(word))
            continue
        if word not in _STOP and len(word) > 1:
            words.add(word.strip("'-"))
    return frozenset(words)


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Share of the smaller set found in the other (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))
