"""Tokenisation shared by lexical recall and the learners' hashed text features.

Identifiers such as ``lawyer.search`` or ``getWeatherForecast`` are split into words first, so a
query that says "search for a lawyer" matches the tool name as well as its description.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["STOP_WORDS", "analyze", "vw_token"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[._/\\\-#:|]+")
# Function words only: scikit-learn's English list also drops words that carry routing meaning
# ("find", "get", "name", "first", "call", "bill", "show", ...).
STOP_WORDS: frozenset[str] = frozenset(
    """a an the and or but nor so yet if then else of in on at by for with from to into onto upon
    about above below over under between among through during before after since until while as
    is am are was were be been being do does did doing have has had having will would shall should
    can could may might must i me my mine myself we us our ours you your yours he him his she her
    hers it its they them their theirs this that these those there here what which who whom whose
    when where why how not no yes all any each both either neither some such than too very just
    also only own same other s t don now please""".split()
)
# scikit-learn's CountVectorizer word analyzer (its default token pattern, lower-cased, stop words
# dropped), written out: importing scikit-learn for it cost about 2 s at every process start.
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_VW_UNSAFE = re.compile(r"[\s|:]+")


@lru_cache(maxsize=65536)
def analyze(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens of ``text`` without English stop words (cached by text)."""
    spaced = _SEPARATORS.sub(" ", _CAMEL.sub(" ", text)).replace("_", " ")
    return tuple(t for t in _TOKEN.findall(spaced.lower()) if t not in STOP_WORDS)


def vw_token(value: str) -> str:
    """``value`` made safe as a Vowpal Wabbit feature name (no whitespace, ``|`` or ``:``)."""
    return _VW_UNSAFE.sub("_", value) or "_"
