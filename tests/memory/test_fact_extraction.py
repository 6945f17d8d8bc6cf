"""The rule extractor of the memory write path: statements of lasting facts become memories, as the
user said them; questions, complaints and tasks for the assistant do not."""

from __future__ import annotations

import pytest

from memabra import extract_facts


@pytest.mark.parametrize(
    ("message", "facts"),
    [
        ("I live in Lyon", ["I live in Lyon"]),
        ("My dog is called Rex. What should I feed him?", ["My dog is called Rex"]),
        ("I already told you: I am allergic to shellfish.", ["I am allergic to shellfish"]),
        ("I'm vegetarian, as I said.", ["I'm vegetarian"]),
        ("Please always answer in French", ["Please always answer in French"]),
        # a task is not a fact, though it speaks in the first person
        ("Draft a message telling my team I am away", []),
        ("Tell them I live in Paris", []),
        ("Let me know when my tea has brewed", []),
        ("Write an out-of-office note for my colleagues", []),
        # ...but what it asks to be remembered is, and so is a statement in a clause of its own
        ("Please remind me that I am allergic to nuts", ["I am allergic to nuts"]),
        ("remember: my dog is called Rex", ["My dog is called Rex"]),
        ("Plan a trip for me, I hate flying", ["I hate flying"]),
        ("Book a table for two, my wife is vegetarian", ["My wife is vegetarian"]),
        ("Set a timer. I live in Oslo now.", ["I live in Oslo now"]),
        ("Where do I live?", []),
    ],
)
def test_extracted_facts(message: str, facts: list[str]) -> None:
    assert extract_facts(message) == facts
