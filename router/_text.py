"""Tokenisation shared by lexical recall and the learners' hashed text features.

Identifiers such as ``lawyer.search`` or ``getWeatherForecast`` are split into words first, so a
query that says "search for a lawyer" matches the tool name as well as its description.

Words are Unicode words (``münchen``, ``москве``), case-folded. Chinese, Japanese and Korean put no
space between words, so a run of their characters is cut into overlapping character pairs
("东京塔" gives "东京", "京塔"), as search engines index them: a query's pair then matches
the memory that holds it, where the whole run as one token would match only the same sentence.
Full-width Latin letters and digits ("ＡＩ", "２０２４") read as their ASCII forms. English text
tokenises exactly as it did before any of this, so a learner's hashed features do not move.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

__all__ = ["CJK_CHARACTER", "STOP_WORDS", "analyze", "cjk_pairs", "fold", "vw_token"]

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
# Han (with its extensions and compatibility block), hiragana, katakana and Hangul: scripts written
# without spaces between words (Korean has spaces, but its particles stick to the noun: "서울에").
# Also the marks written inside a Han run though their block is punctuation: the iteration marks
# 々 and 〻 ("人々", "時々"), 〆 and the ideographic zero 〇 ("二〇二四年").
_CJK_RANGES = (
    "\u1100-\u11ff\u3005-\u3007\u303b\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
)
CJK_CHARACTER = re.compile(f"[{_CJK_RANGES}]")
# Full-width and half-width forms (U+FF01-U+FFEF) only: the rest of NFKC would also rewrite "m²" as
# "m2" and "™" as "tm", changing the tokens of text that tokenises well today.
_WIDTH_FORMS = re.compile("[\uff01-\uffef]+")
# scikit-learn's CountVectorizer word analyzer (its default token pattern, lower-cased, stop words
# dropped), written out: importing scikit-learn for it cost about 2 s at every process start. A
# run of CJK characters is its own token, whatever precedes it ("python编程": "python", "编程").
_TOKEN = re.compile(f"[{_CJK_RANGES}]+|(?:(?![{_CJK_RANGES}])\\w)+")
_VW_UNSAFE = re.compile(r"[\s|:]+")


def fold(text: str) -> str:
    """``text`` case-folded, with full-width and half-width forms read as their usual forms."""
    if not text.isascii():
        text = _WIDTH_FORMS.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    return text.casefold()


def cjk_pairs(run: str) -> Iterator[str]:
    """The overlapping character pairs of a run of CJK characters (a lone character stands alone)."""
    if len(run) == 1:
        yield run
    for i in range(len(run) - 1):
        yield run[i : i + 2]


def _tokens(text: str) -> Iterator[str]:
    for token in _TOKEN.findall(text):
        if CJK_CHARACTER.match(token):
            yield from cjk_pairs(token)
        elif len(token) > 1 and token not in STOP_WORDS:
            yield token


@lru_cache(maxsize=65536)
def analyze(text: str) -> tuple[str, ...]:
    """Case-folded word tokens of ``text`` without English stop words, CJK runs as character pairs
    (cached by text)."""
    spaced = _SEPARATORS.sub(" ", _CAMEL.sub(" ", text)).replace("_", " ")
    return tuple(_tokens(fold(spaced)))


def vw_token(value: str) -> str:
    """``value`` made safe as a Vowpal Wabbit feature name (no whitespace, ``|`` or ``:``)."""
    return _VW_UNSAFE.sub("_", value) or "_"
