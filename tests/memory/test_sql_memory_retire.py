"""Retiring a memory by hand and restoring it (the SQL registry): kept with its history, not
recalled while retired, recalled again once restored; each change in its history."""

from __future__ import annotations

import pytest

from memabra import InvalidRecordError, MemoryStatus, SQLMemory
from memabra._memory import MemoryAction
from memabra.storage import EpisodeLog


@pytest.fixture
def sql_memory(log: EpisodeLog) -> SQLMemory:
    return SQLMemory(log)


def test_retire_then_restore(sql_memory: SQLMemory) -> None:
    item = sql_memory.remember("ann", "My dog is called Rex")
    retired = sql_memory.retire("ann", item.id, reason="wrong dog")
    assert retired.status is MemoryStatus.RETIRED and retired.text == "My dog is called Rex"
    assert sql_memory.items("ann") == [] and sql_memory.recall("ann", "dog") == []
    restored = sql_memory.restore("ann", item.id).memory
    assert restored.status is MemoryStatus.ACTIVE and [i.id for i in sql_memory.recall("ann", "dog")] == [item.id]
    history = sql_memory.history("ann", item.id)
    assert [(c.action, c.reason) for c in history] == [
        (MemoryAction.CREATED, "user"),
        (MemoryAction.RETIRED, "wrong dog"),
        (MemoryAction.RESTORED, "restored by hand"),
    ]


def test_restoring_a_superseded_memory_never_leaves_two_current_values_unasked(sql_memory: SQLMemory) -> None:
    old = sql_memory.remember("ann", "I live in Lyon")
    new = sql_memory.remember("ann", "I live in Paris")
    assert sql_memory.get("ann", old.id).superseded_by == new.id
    with pytest.raises(InvalidRecordError, match=f"contradicts the current {new.id} .*--replace.*--keep-both"):
        sql_memory.restore("ann", old.id)
    assert sql_memory.get("ann", old.id).status is MemoryStatus.RETIRED  # nothing written
    with pytest.raises(InvalidRecordError, match="replace and keep_both exclude each other"):
        sql_memory.restore("ann", old.id, replace=True, keep_both=True)
    replaced = sql_memory.restore("ann", old.id, replace=True)
    assert replaced.memory.superseded_by is None and replaced.memory.status is MemoryStatus.ACTIVE
    assert replaced.retired == (new.id,) and sql_memory.get("ann", new.id).status is MemoryStatus.RETIRED


def test_a_wrong_supersession_is_undone_keeping_both_facts(sql_memory: SQLMemory) -> None:
    old = sql_memory.remember("ann", "I live in Lyon")
    new = sql_memory.remember("ann", "I live in Paris")
    kept = sql_memory.restore("ann", old.id, keep_both=True, reason="Lyon is the winter flat")
    assert kept.memory.status is MemoryStatus.ACTIVE and kept.retired == ()
    assert sql_memory.get("ann", new.id).status is MemoryStatus.ACTIVE
    assert sql_memory.history("ann", old.id)[-1].reason == "Lyon is the winter flat"


def test_a_change_that_does_not_apply_is_refused_and_writes_nothing(sql_memory: SQLMemory) -> None:
    item = sql_memory.remember("ann", "I play chess")
    with pytest.raises(InvalidRecordError, match="already active"):
        sql_memory.restore("ann", item.id)
    sql_memory.retire("ann", item.id)
    with pytest.raises(InvalidRecordError, match="already retired"):
        sql_memory.retire("ann", item.id)
    with pytest.raises(InvalidRecordError, match="no memory"):
        sql_memory.retire("bob", item.id)  # another user's id is not theirs to retire
    assert [c.action for c in sql_memory.history("ann", item.id)] == [MemoryAction.CREATED, MemoryAction.RETIRED]
