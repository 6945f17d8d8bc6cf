"""Review: Japanese and Chinese iteration and zero marks are part of the word they sit in.

``々`` (U+3005, "人々" people, "時々" sometimes, "様々" various), ``〆`` (U+3006) and ``〇`` (U+3007,
the zero of "二〇二四年") are written inside runs of Han characters, but sit in the CJK Symbols and
Punctuation block, which the CJK ranges left out: the run was cut at them, so "人々" lost its pair
and the mark itself (a one-character non-CJK word) was dropped.
"""

from __future__ import annotations

from memabra._text import approx_tokens, content_words
from memabra.router._text import analyze


def test_the_iteration_mark_stays_inside_its_run_for_the_router() -> None:
    assert analyze("時々東京へ行く") == ("時々", "々東", "東京", "京へ", "へ行", "行く")
    assert "人々" in analyze("人々は様々な料理が好き")
    assert "二〇" in analyze("二〇二四年")


def test_the_iteration_mark_stays_inside_its_run_for_recall_and_usage() -> None:
    words = content_words("人々は様々な料理が好き")
    assert {"人々", "様々"} <= words
    # a memory about "various dishes" shares the pair the question asks with
    assert content_words("様々") <= words


def test_the_iteration_mark_costs_a_token_like_the_character_it_repeats() -> None:
    assert approx_tokens("人々") == approx_tokens("人人") == 2
    assert approx_tokens("時々 人々 様々") == approx_tokens("時時 人人 様様") == 6
