"""Tokenisation shared by lexical recall and the learners' hashed text features.

Identifiers such as ``lawyer.search`` or ``getWeatherForecast`` are split into words first, so a
query that says "search for a lawyer" matches the tool name as well as its description.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

__all__ = ["analyze", "vw_token"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[._/\\\-#:|]+")
_ANALYZER = CountVectorizer(lowercase=True, stop_words=sorted(ENGLISH_STOP_WORDS)).build_analyzer()
_VW_UNSAFE = re.compile(r"[\s|:]+")


@lru_cache(maxsize=65536)
def analyze(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens of ``text`` without English stop words (cached by text)."""
    spaced = _SEPARATORS.sub(" ", _CAMEL.sub(" ", text)).replace("_", " ")
    return tuple(_ANALYZER(spaced))


def vw_token(value: str) -> str:
    """``value`` made safe as a Vowpal Wabbit feature name (no whitespace, ``|`` or ``:``)."""
    return _VW_UNSAFE.sub("_", value) or "_"
