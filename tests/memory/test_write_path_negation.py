"""A negation retires the fact it negates, on both backends: "I don't live in Lyon anymore" retires
"I live in Lyon" (before, both stayed current), "I'm not vegetarian now" retires "I'm vegetarian"
(before, it was logged as a restatement of it); a third party's fact, a hedge or a quote retires
nothing of the user's."""

from __future__ import annotations

from memabra._facts import RuleFactExtractor
from memabra._memory import MemoryBackend
from memabra._memory_records import MemoryAction

RULES = RuleFactExtractor()


def _say(memory: MemoryBackend, message: str, user: str = "ann") -> None:
    memory.write_from_message(user, message, RULES)


def _current(memory: MemoryBackend, user: str = "ann") -> list[str]:
    return sorted(i.text for i in memory.items(user))


def test_a_negation_retires_the_fact_it_negates(memory: MemoryBackend) -> None:
    lyon = memory.remember("ann", "I live in Lyon")
    diet = memory.remember("ann", "I'm vegetarian")
    memory.remember("ann", "I'm allergic to nuts")
    _say(memory, "I don't live in Lyon anymore")
    _say(memory, "i\u2019m not vegetarian now")
    assert _current(memory) == ["I don't live in Lyon anymore", "I'm allergic to nuts", "i'm not vegetarian now"]
    for old in (lyon, diet):
        last = memory.history("ann", old.id)[-1]
        assert last.action is MemoryAction.RETIRED and last.reason.startswith("superseded by")


def test_a_fact_retires_its_stored_negation_and_a_negation_leaves_other_values(memory: MemoryBackend) -> None:
    memory.remember("ann", "I live in Hobart")
    memory.remember("ann", "I don't eat meat")
    _say(memory, "I don't live in Lyon anymore")  # another city: Hobart stays
    _say(memory, "I eat meat again")
    assert _current(memory) == ["I don't live in Lyon anymore", "I eat meat", "I live in Hobart"]


def test_a_negation_cuts_only_its_fact_out_of_a_joined_memory(memory: MemoryBackend) -> None:
    memory.remember("ann", "I live in Lyon and my dog is called Rex")
    _say(memory, "I no longer live in Lyon")
    assert _current(memory) == ["I no longer live in Lyon", "My dog is called Rex"]


def test_an_import_of_a_negation_retires_what_it_negates(memory: MemoryBackend) -> None:
    memory.remember("ann", "I'm vegetarian")
    memory.remember_many("ann", ["I'm not vegetarian anymore", "I like jazz"])
    assert _current(memory) == ["I like jazz", "I'm not vegetarian anymore"]


def test_third_parties_hedges_and_quotes_retire_nothing_of_the_users(memory: MemoryBackend) -> None:
    memory.remember("ann", "I follow a vegetarian diet")
    memory.remember("ann", "I live in Lyon")
    for message in (
        "My wife's diet is vegan",
        "my wife is on a keto diet, what should I cook?",
        "Maybe I'm vegan",
        "My friend said 'I live in Paris'",
        "I'm not sure I live in Lyon",
    ):
        _say(memory, message)
    current = _current(memory)
    assert "I follow a vegetarian diet" in current and "I live in Lyon" in current
    assert not any("Paris" in t for t in current)


def test_a_new_age_retires_the_old_one(memory: MemoryBackend) -> None:
    memory.remember("ann", "I'm 34")
    _say(memory, "I'm 35 now, time flies")
    assert _current(memory) == ["I'm 35 now, time flies"]


def test_a_hedged_negation_retires_nothing(memory: MemoryBackend) -> None:
    memory.remember("ann", "I'm allergic to nuts")
    _say(memory, "I don't think I'm allergic to nuts")
    assert _current(memory) == ["I don't think I'm allergic to nuts", "I'm allergic to nuts"]
