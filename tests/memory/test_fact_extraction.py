"""The rule extractor of the memory write path: statements of lasting facts become memories, as the
user said them, one per independent fact; questions, complaints and tasks for the assistant do not;
only a new value of a single-valued subject supersedes a stored fact."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from fakes import ScriptedChatModel
from memabra import extract_facts
from memabra._facts import RuleFactExtractor
from memabra._llm_facts import LLMFactExtractor


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


@pytest.mark.parametrize(
    ("message", "facts"),
    [
        # independent first-person facts joined in one sentence become one memory each...
        ("I live in Lyon and my dog is called Rex.", ["I live in Lyon", "My dog is called Rex"]),
        ("My name is Ann and I'm allergic to nuts.", ["My name is Ann", "I'm allergic to nuts"]),
        ("I live in Lyon, and my dog is called Rex", ["I live in Lyon", "My dog is called Rex"]),
        ("I'm vegetarian but my wife is vegan", ["I'm vegetarian", "My wife is vegan"]),
        ("Remember that I'm a nurse and my dog is called Rex", ["I'm a nurse", "My dog is called Rex"]),
        # ...but one fact stays whole, and so does a clause that leans on the one before
        ("I like salt and pepper", ["I like salt and pepper"]),
        ("My wife and I live in Lyon", ["My wife and I live in Lyon"]),
        ("I live in Lyon and I love it", ["I live in Lyon and I love it"]),
        ("I'm vegetarian and my wife is too", ["I'm vegetarian and my wife is too"]),
    ],
)
def test_a_sentence_joining_independent_facts_gives_one_fact_each(message: str, facts: list[str]) -> None:
    assert extract_facts(message) == facts


@pytest.mark.parametrize(
    ("old", "new", "retires"),
    [
        ("I live in Lyon", "I moved to Hobart", True),
        ("My name is Ann", "My name is Annabel", True),
        ("My dog is called Rex", "My dog's name is Max", True),
        ("My favourite colour is blue", "My favorite colour is green", True),
        ("I work at Acme", "I work as a nurse", True),
        # a passing state or event, or a fact that holds beside the other, replaces nothing
        ("My dog is called Rex", "My dog is sick", False),
        ("My sister is a doctor", "My sister is visiting next week", False),
        ("I live in Lyon", "I'm living in Paris this summer", False),
        ("I work at Acme", "I work from home on Fridays", False),
        ("I live in Lyon", "I live with my partner", False),
        ("My name is Ann", "My name is spelled with two n's", False),
        ("My dog is called Rex", "My cat is called Tom", False),
        ("I am allergic to peanuts", "I am allergic to sesame", False),
        # a stored memory joining several facts is named when one of them is replaced
        ("I live in Lyon and my dog is called Rex", "I moved to Hobart", True),
        ("My name is Ann and I live in Lyon", "My name is Annabel", True),
    ],
)
def test_only_a_new_value_of_a_single_valued_subject_supersedes(old: str, new: str, retires: bool) -> None:
    assert bool(RuleFactExtractor().superseded(new, [("m1", old)])) is retires


def test_the_model_extractor_is_told_to_split_facts_and_keep_passing_states_apart() -> None:
    assert "'I live in Lyon and my dog is called Rex' is two facts" in LLMFactExtractor.PROMPT
    assert "'I like salt and pepper' is one" in LLMFactExtractor.PROMPT
    assert "'my dog is sick', 'my sister is visiting next week'" in LLMFactExtractor.SUPERSEDE_PROMPT


def test_facts_a_model_joins_anyway_are_cut_as_the_rules_would() -> None:
    model = ScriptedChatModel(replies=[AIMessage('["I live in Lyon and my dog is called Rex"]')])
    assert LLMFactExtractor(model)("I live in Lyon and my dog is called Rex") == [
        "I live in Lyon",
        "My dog is called Rex",
    ]
