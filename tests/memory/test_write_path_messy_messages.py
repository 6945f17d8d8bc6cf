"""The rule extractor on messages as real users type them: phone apostrophes, lower case, a fact
beside a question, interjections, complaints in many words, quotes, hedges, third parties and
requests phrased in the first person. Each case failed before the rule it names."""

from __future__ import annotations

import pytest

from memabra import extract_facts
from memabra._corrections import detect_correction
from memabra._facts import fact_subject


@pytest.mark.parametrize(
    ("message", "facts"),
    [
        # a phone's apostrophe (U+2019) and a lone "im" are "I'm"
        ("I\u2019m vegetarian", ["I'm vegetarian"]),
        ("i live in lyon and im vegetarian", ["i live in lyon", "I'm vegetarian"]),
        # a fact beside a question in one sentence: the fact counts, the question never does
        ("I'm vegetarian, what should I cook tonight?", ["I'm vegetarian"]),
        ("Hey, I'm vegan, any ideas for dinner?", ["I'm vegan"]),
        ("what should i cook, im vegan", ["I'm vegan"]),
        ("Since I'm vegetarian, what can I cook?", ["I'm vegetarian"]),  # the premise is a statement
        ("am I vegetarian?", []),
        # a request to remember asked as a question, or in the first person
        ("Can you remember that I'm vegetarian?", ["I'm vegetarian"]),
        ("I want you to remember I'm vegan", ["I'm vegan"]),
        # a task in the first person is still a task
        ("I need you to book a flight to Oslo", []),
        ("I need help with my email", []),
        # the complaint, however it is worded, is never stored
        ("i already told u i'm vegetarian", ["i'm vegetarian"]),
        ("Ugh, I already said I'm vegetarian", ["I'm vegetarian"]),
        ("omg i already told you, im vegetarian", ["I'm vegetarian"]),
        ("How many times do I have to tell you, I'm vegetarian", ["I'm vegetarian"]),
        ("I'm vegetarian (as I said)", ["I'm vegetarian"]),
        ("I'm vegetarian as I already said", ["I'm vegetarian"]),
        ("you're wrong, I'm not vegetarian, my wife is", ["I'm not vegetarian, my wife is"]),
        # an interjection before the fact is not part of it
        ("No no, I live in Hobart now", ["I live in Hobart now"]),
        ("Actually, I live in Hobart", ["I live in Hobart"]),
        # someone else's words, quoted, are not the user's; the user's own, quoted, are
        ("My friend said 'I live in Paris'", []),
        ('my friend said "I live in Paris"', []),
        ("My friend said \u2018I\u2019m vegan\u2019", []),
        ('"I live in Lyon"', ["I live in Lyon"]),
        # "&" joins two facts as "and" does
        ("I live in Lyon & my dog is called Rex", ["I live in Lyon", "My dog is called Rex"]),
    ],
)
def test_messy_messages(message: str, facts: list[str]) -> None:
    assert extract_facts(message) == facts


@pytest.mark.parametrize(
    ("fact", "subject"),
    [
        # a third party's diet is theirs, not the user's
        ("My wife's diet is vegan", None),
        ("my wife is on a keto diet", None),
        ("I follow a vegetarian diet", "diet"),
        ("I'm on a low-salt diet", "diet"),
        # a hedge or a negation states no current value
        ("Maybe I'm vegetarian", None),
        ("I'm not sure I live in Lyon", None),
        ("I'm not on a diet anymore", None),
        # "I'm 34" is the user's age, as "my age is 34" is
        ("I'm 34", "my age"),
        ("I'm 34 years old", "my age"),
        ("My age is 35", "my age"),
        ("I'm 5 minutes away", None),
    ],
)
def test_subjects_of_messy_facts(fact: str, subject: str | None) -> None:
    assert fact_subject(fact) == subject


MEMORIES = [("m1", "I'm vegetarian"), ("m2", "I live in Lyon")]


@pytest.mark.parametrize(
    ("message", "kinds"),
    [
        # "I already" about anything but telling is no complaint
        ("I already ordered, thanks", []),
        ("I already have a recipe", []),
        ("I already know it's raining", []),
        # ...and complaints in other words are
        ("I\u2019ve already told you I\u2019m vegetarian", [("restated_memory", "m1")]),
        ("how many times do I have to tell you, I'm vegetarian", [("restated_memory", "m1")]),
        ("I said I'm vegetarian", [("restated_memory", "m1")]),
        ("I'm vegetarian, remember?", [("restated_memory", "m1")]),
        # a negation of a memory does not name that memory as the one the turn should have used
        ("I already told you I'm not vegetarian anymore", [("restated_memory", None)]),
    ],
)
def test_corrections_in_messy_messages(message: str, kinds: list[tuple[str, str | None]]) -> None:
    found = detect_correction("what should I cook tonight?", message, MEMORIES)
    assert [(s.kind, s.memory_id) for s in found] == kinds
