from __future__ import annotations

import pytest

from memabra._corrections import detect_correction

MEMORIES = [("m-name", "My name is Ann Lee and I live in Lyon"), ("m-diet", "I am vegetarian, no meat please")]


def kinds(signals) -> list[str]:  # type: ignore[no-untyped-def]
    return [s.kind for s in signals]


def test_restating_a_memory_is_a_correction_naming_the_memory() -> None:
    signals = detect_correction("book me a dinner", "I already told you, I am vegetarian, no meat", MEMORIES)
    assert kinds(signals) == ["restated_memory"]
    assert signals[0].memory_id == "m-diet" and signals[0].severity == 1.0


def test_saying_the_answer_was_wrong() -> None:
    assert kinds(detect_correction("capital of Australia?", "No, that's wrong, it is Canberra")) == ["wrong_answer"]


def test_saying_the_tool_was_wrong() -> None:
    assert "wrong_tool" in kinds(
        detect_correction("weather in Oslo", "you used the wrong tool, use the forecast tool instead")
    )


def test_asking_the_same_question_again_is_a_repeat() -> None:
    assert kinds(
        detect_correction("what is the weather in Oslo tomorrow", "What is the weather in Oslo tomorrow?")
    ) == ["repeat"]


def test_an_ordinary_follow_up_is_not_a_correction() -> None:
    assert detect_correction("what is the weather in Oslo", "great, and what should I wear?", MEMORIES) == []


def test_as_i_said_after_a_turn_that_succeeded_is_not_a_correction() -> None:
    message = "I'm vegetarian, as I said."
    assert detect_correction("what is the weather in Oslo", message, MEMORIES, previous_succeeded=True) == []


def test_as_i_said_when_the_memory_was_already_in_context_is_not_a_correction() -> None:
    message = "I'm vegetarian, no meat, as I said."
    assert detect_correction("book me a dinner", message, MEMORIES, injected_ids={"m-diet"}) == []


def test_as_i_said_after_a_turn_that_missed_the_memory_is_a_correction() -> None:
    signals = detect_correction(
        "book me a dinner", "I'm vegetarian, no meat, as I said.", MEMORIES, previous_succeeded=False
    )
    assert kinds(signals) == ["restated_memory"] and signals[0].memory_id == "m-diet"


def test_an_outright_complaint_is_a_correction_even_after_a_success() -> None:
    signals = detect_correction(
        "book me a dinner", "I already told you I am vegetarian, no meat", MEMORIES, previous_succeeded=True
    )
    assert kinds(signals) == ["restated_memory"]


def test_verdicts_from_explicit_feedback() -> None:
    from memabra._corrections import verdict_of

    assert verdict_of([{"success": 1.0}]) is True
    assert verdict_of([{"success": 0.5}]) is False
    assert verdict_of([{"correct": True}, {"correction": "I moved"}]) is False
    assert verdict_of([{"rating": 5}]) is True
    assert verdict_of([{"comment": "hm"}]) is None


@pytest.mark.parametrize(
    ("payload", "expected_s"),
    [
        ({"success": 1.0, "rating": 2}, 1.0),  # success is read before rating
        ({"correct": False, "rating": 5}, 0.0),  # correct before rating
        ({"success": 0.25, "correct": True}, 0.25),  # success before correct
        ({"correct": True, "misleading": True}, -0.5),  # misleading before correct
    ],
)
def test_a_verdict_reads_a_payload_as_the_reward_does(payload: dict[str, object], expected_s: float) -> None:
    """Whether a soft reminder counts as a correction hangs on the previous turn's verdict: it must be
    the success the reward's S gives that turn, not another reading of the same payload."""
    from factories import episode
    from memabra import Feedback
    from memabra._corrections import verdict_of
    from memabra._reward import CompositeReward

    ep = episode()
    s = CompositeReward().score(ep, [Feedback(ep.id, "explicit", "user", payload)]).components.s
    assert s == expected_s
    assert verdict_of([payload]) is (s >= 0.75)


def test_a_payload_the_reward_cannot_read_gives_no_verdict() -> None:
    from memabra._corrections import verdict_of

    assert verdict_of([{"rating": 9}]) is None
    assert verdict_of([{"rating": 5}, {"rating": "bad"}]) is True
    assert verdict_of([{"rating": 5, "note": "unknown keys are ignored"}]) is True
