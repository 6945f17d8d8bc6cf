"""``MemoryBackend.update`` keeps one current value per subject, as ``edit_memory`` (the CLI's and
the admin's edit) does: before, a library caller turning "I'm planning to move to Oslo" into "I
live in Oslo" left "I live in Hobart" current beside it, and the agent went on answering Hobart.
Refused naming the contradicted memory (nothing written); ``replace`` retires it in the same
write, ``keep_both`` keeps it (the old rewrite in place). Over the SQL registry and LangGraph
stores (tests/memory/conftest.py)."""

from __future__ import annotations

import pytest

from memabra import InvalidRecordError, MemoryAction, MemoryStatus, SQLMemory
from memabra._facts import RuleFactExtractor
from memabra._memory import MemoryBackend
from memabra.storage import EpisodeLog


def _current(memory: MemoryBackend) -> list[str]:
    return [r.text for r in memory.list("ann", include_retired=False)]


def _state(memory: MemoryBackend) -> list[tuple[str, str, str, int]]:
    return [(r.id, r.text, r.status.value, len(memory.history("ann", r.id))) for r in memory.list("ann")]


def test_an_update_contradicting_another_current_memory_is_refused_naming_it(memory: MemoryBackend) -> None:
    hobart = memory.remember("ann", "I live in Hobart")
    plan = memory.remember("ann", "I'm planning to move to Oslo")
    before = _state(memory)
    with pytest.raises(InvalidRecordError, match=f"contradicts the current {hobart.id} \\('I live in Hobart'\\)"):
        memory.update("ann", plan.id, "I live in Oslo")
    assert _state(memory) == before  # nothing written


def test_an_update_restating_another_current_memory_is_refused(memory: MemoryBackend) -> None:
    lyon = memory.remember("ann", "I live in Lyon")
    dog = memory.remember("ann", "My dog is called Rex")
    with pytest.raises(InvalidRecordError, match=f"contradicts the current {lyon.id}"):
        memory.update("ann", dog.id, "I live in Lyon")
    assert _current(memory) == ["I live in Lyon", "My dog is called Rex"]


def test_replace_retires_the_contradicted_memory_in_the_same_write_with_the_episode(memory: MemoryBackend) -> None:
    hobart = memory.remember("ann", "I live in Hobart")
    plan = memory.remember("ann", "I'm planning to move to Oslo")
    updated = memory.update("ann", plan.id, "I live in Oslo", replace=True, episode_id="ep-9", reason="moved")
    assert updated.text == "I live in Oslo" and _current(memory) == ["I live in Oslo"]
    old = memory.get("ann", hobart.id)
    assert old.status is MemoryStatus.RETIRED and old.superseded_by == plan.id
    retired = memory.history("ann", hobart.id)[-1]
    assert (retired.action, retired.episode_id, retired.reason) == (
        MemoryAction.RETIRED,
        "ep-9",
        f"superseded by {plan.id} (edited)",
    )
    edit = memory.history("ann", plan.id)[-1]
    assert (edit.action, edit.new_text, edit.episode_id, edit.reason) == (
        MemoryAction.UPDATED,
        "I live in Oslo",
        "ep-9",
        "moved",
    )


def test_replace_cuts_only_the_replaced_fact_out_of_a_memory_joining_several(memory: MemoryBackend) -> None:
    joined = memory.remember("ann", "I live in Hobart and my dog is called Rex")
    plan = memory.remember("ann", "I'm planning to move to Oslo")
    memory.update("ann", plan.id, "I live in Oslo", replace=True)
    assert memory.get("ann", joined.id).text == "My dog is called Rex"
    assert sorted(_current(memory)) == ["I live in Oslo", "My dog is called Rex"]


def test_keep_both_rewrites_in_place_as_update_did(memory: MemoryBackend) -> None:
    memory.remember("ann", "I live in Hobart")
    plan = memory.remember("ann", "I'm planning to move to Oslo")
    memory.update("ann", plan.id, "I live in Oslo", keep_both=True)
    assert _current(memory) == ["I live in Hobart", "I live in Oslo"]
    with pytest.raises(InvalidRecordError, match="exclude each other"):
        memory.update("ann", plan.id, "I live in Bergen", replace=True, keep_both=True)


def test_an_update_contradicting_nothing_is_written_as_before(memory: MemoryBackend) -> None:
    dog = memory.remember("ann", "My dog is called Rex")
    memory.remember("ann", "I live in Hobart")
    memory.update("ann", dog.id, "My dog is called Luna", episode_id="ep-7")
    change = memory.history("ann", dog.id)[-1]
    assert (change.action, change.old_text, change.new_text, change.episode_id) == (
        MemoryAction.UPDATED,
        "My dog is called Rex",
        "My dog is called Luna",
        "ep-7",
    )
    assert _current(memory) == ["My dog is called Luna", "I live in Hobart"]


class _MeanwhileTheAgentWrites:
    """Supersession that, the first time the update consults it, lets the agent store a fact (another
    process, between the update's read and its write), then decides as the rules do."""

    def __init__(self, other: SQLMemory, fact: str) -> None:
        self.other, self.fact, self.done = other, fact, False
        self.rules = RuleFactExtractor()

    def superseded(self, fact: str, existing: list[tuple[str, str]]) -> list[str]:
        if not self.done:
            self.done = True
            self.other.remember("ann", self.fact)
        return self.rules.superseded(fact, existing)


def test_an_update_decided_on_a_stale_read_is_decided_again(log: EpisodeLog) -> None:
    agent = SQLMemory(log)
    agent.remember("ann", "My dog is called Rex")
    plan = agent.remember("ann", "I'm planning to move to Oslo").id
    library = SQLMemory(log, supersession=_MeanwhileTheAgentWrites(agent, "I live in Bergen"))
    with pytest.raises(InvalidRecordError, match="contradicts the current .*'I live in Bergen'"):
        library.update("ann", plan, "I live in Oslo")
    assert _current(agent) == ["My dog is called Rex", "I'm planning to move to Oslo", "I live in Bergen"]


def test_update_is_edit_memorys_rule_reason_and_same_text_included(memory: MemoryBackend) -> None:
    """``update`` ran a copy of ``edit_memory``'s loop that skipped its reason check and recorded a
    rewrite to the same text; it now runs ``edit_memory`` itself (one rule, one place)."""
    dog = memory.remember("ann", "My dog is called Rex")
    with pytest.raises(InvalidRecordError, match="control character"):
        memory.update("ann", dog.id, "My dog is called Luna", reason="ticket 7\x1b[2J")
    memory.update("ann", dog.id, "My dog is called Rex")  # a re-sent form: nothing to record
    assert [c.action for c in memory.history("ann", dog.id)] == [MemoryAction.CREATED]
