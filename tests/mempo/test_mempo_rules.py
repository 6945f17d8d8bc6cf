from __future__ import annotations

import pytest

from memabra.evals.mempo import (
    FormatRule,
    compute_score,
    em_check,
    extract_solution,
    format_violations,
    normalize_answer,
    split_turns,
    validate_format,
)

SEARCH_TURN = (
    "<mem>nothing yet</mem>\n<think>i need to search</think>\n<search>capital of france</search>\n"
    "<tool_response>paris is the capital of france</tool_response>"
)
ANSWER_TURN = "<mem>the capital of france is paris</mem>\n<think>so it is paris</think>\n<answer> Paris </answer>"
VALID = (SEARCH_TURN, ANSWER_TURN)


def test_normalize_answer_lowercases_strips_punctuation_articles_and_spaces() -> None:
    # the spec's example prints "united states america"; only a / an / the are articles, "of" stays
    assert normalize_answer("The United States of America!") == "united states of america"
    assert normalize_answer("  An   apple,  a PEAR & the... plum ") == "apple pear plum"
    assert normalize_answer("Theatre anthem") == "theatre anthem"
    assert normalize_answer("") == ""


def test_em_check_matches_any_alias_and_takes_a_bare_string() -> None:
    assert em_check("the Obama", ["Barack Obama", "Obama"]) == 1
    assert em_check("obama!", "Obama") == 1
    assert em_check("Barack", ["Barack Obama", "Obama"]) == 0
    with pytest.raises(ValueError, match="golden_answers"):
        em_check("x", [])


def test_extract_solution_takes_the_last_answer_stripped() -> None:
    assert extract_solution(VALID) == "Paris"
    assert extract_solution("<answer>first</answer> then <answer>\n second \n</answer>") == "second"
    assert extract_solution("<answer>unclosed") is None
    assert extract_solution(SEARCH_TURN) is None


def test_the_reference_trajectory_is_valid_as_turns_and_as_one_string() -> None:
    assert validate_format(VALID) == (True, None)
    assert validate_format("\n".join(VALID)) == (True, None)
    assert split_turns("\n".join(VALID)) == (SEARCH_TURN + "\n", ANSWER_TURN)


def test_a_flat_string_with_text_before_the_first_memory_has_a_turn_without_one() -> None:
    assert split_turns("hello <mem>m</mem>") == ("hello ", "<mem>m</mem>")
    assert validate_format("hello " + "\n".join(VALID)) == (False, FormatRule.TURN_OPENS_WITH_MEM)


BROKEN: dict[FormatRule, tuple[str, ...]] = {
    FormatRule.THINK_BALANCED: (SEARCH_TURN, ANSWER_TURN.replace("</think>", "</think></think>")),
    FormatRule.ANSWER_BALANCED: (SEARCH_TURN, "<mem>m</mem><think>no answer yet</think>"),
    FormatRule.SEARCH_BALANCED: (ANSWER_TURN,),
    FormatRule.MEM_BALANCED: (SEARCH_TURN, ANSWER_TURN.replace("</mem>", "</mem></mem>")),
    FormatRule.TURN_OPENS_WITH_MEM: (SEARCH_TURN, "<think>t</think><mem>m</mem><answer>Paris</answer>"),
    FormatRule.TURN_HAS_THINK: (
        SEARCH_TURN.replace("<search>", "<think>again</think><search>"),
        ANSWER_TURN.replace("<think>so it is paris</think>", ""),
    ),
    FormatRule.SEARCH_THEN_TOOL_RESPONSE: (
        "<mem>m</mem><think>t</think><tool_response>doc</tool_response><search>q</search>",
        ANSWER_TURN,
    ),
    FormatRule.ANSWER_IN_FINAL_TURN: (SEARCH_TURN + "<answer>guess</answer>", ANSWER_TURN),
}


@pytest.mark.parametrize("rule", list(FormatRule), ids=str)
def test_each_rule_can_be_broken_on_its_own(rule: FormatRule) -> None:
    assert format_violations(BROKEN[rule]) == (rule,)
    assert validate_format(BROKEN[rule]) == (False, rule)


def test_answer_close_before_open_breaks_rule_eight_only() -> None:
    turns = (SEARCH_TURN, "<mem>m</mem><think>t</think></answer>Paris<answer>")
    assert format_violations(turns) == (FormatRule.ANSWER_IN_FINAL_TURN,)


def test_a_search_left_unanswered_breaks_rule_seven() -> None:
    turns = (SEARCH_TURN.split("<tool_response>")[0], ANSWER_TURN)
    assert format_violations(turns) == (FormatRule.SEARCH_THEN_TOOL_RESPONSE,)


def test_several_searches_in_one_turn_each_answered_are_valid() -> None:
    double = SEARCH_TURN + "<search>q2</search><tool_response>d2</tool_response>"
    assert validate_format((double, ANSWER_TURN)) == (True, None)


def test_an_empty_response_fails_the_first_rule() -> None:
    assert validate_format(()) == (False, FormatRule.THINK_BALANCED)
    assert validate_format("") == (False, FormatRule.THINK_BALANCED)


def test_rules_reject_non_string_turns() -> None:
    with pytest.raises(TypeError, match="turn 1"):
        validate_format(["<mem>m</mem>", 3])  # type: ignore[list-item]


def test_compute_score_string_target() -> None:
    assert compute_score(VALID, "paris") == 1.0
    assert compute_score(VALID, "rome") == 0.0


def test_compute_score_is_zero_for_a_broken_format_even_with_the_right_answer() -> None:
    assert compute_score(BROKEN[FormatRule.SEARCH_BALANCED], "paris") == 0.0


def test_compute_score_aliases_match_any() -> None:
    assert compute_score(VALID, ["City of Paris", "Paris"]) == 1.0
    assert compute_score(VALID, ["Lutetia", "City of Light"]) == 0.0


def answering(answer: str) -> tuple[str, ...]:
    return (SEARCH_TURN, f"<mem>m</mem><think>t</think><answer>{answer}</answer>")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Paris; Tokyo", 1.0),
        ("paris ; the Tokyo.", 1.0),
        ("Paris; Rome", 0.5),
        ("Paris", 0.5),
        ("Tokyo; Paris", 0.0),
        ("Paris; Tokyo; Rome", 1.0),
    ],
)
def test_compute_score_multi_answer_is_the_fraction_matched_in_order(answer: str, expected: float) -> None:
    assert compute_score(answering(answer), [["Paris", "Lutetia"], ["Tokyo", "Edo"]]) == pytest.approx(expected)


def test_compute_score_multi_answer_of_three() -> None:
    assert compute_score(answering("a1; b9; c1"), [["a1"], ["b1"], ["c1"]]) == pytest.approx(2 / 3)


@pytest.mark.parametrize("target", [[], [["a"], []], ["a", ["b"]], [["a"], [3]], 7])
def test_compute_score_rejects_malformed_targets(target: object) -> None:
    with pytest.raises(ValueError, match="target"):
        compute_score(VALID, target)  # type: ignore[arg-type]
