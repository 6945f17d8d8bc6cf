"""A retired memory is never made current by accident: ``update`` refuses it, and restoring it
refuses (or, with ``replace``, retires in the same write) the current memory it contradicts."""

from __future__ import annotations

import pytest

from memabra import InvalidRecordError, MemoryStatus, SQLMemory
from memabra._memory import MemoryAction, MemoryBackend
from memabra._memory_restore import conflicting_memories, restore_memory
from memabra.storage import EpisodeLog


def _current(memory: MemoryBackend, user: str) -> list[str]:
    return [r.text for r in memory.list(user, include_retired=False)]


def test_updating_a_retired_memory_is_refused_and_changes_nothing(memory: MemoryBackend) -> None:
    bergen = memory.remember("ann", "I moved to Bergen last month")
    lyon = memory.remember("ann", "I live in Lyon")
    assert memory.get("ann", bergen.id).status is MemoryStatus.RETIRED
    with pytest.raises(InvalidRecordError, match=f"{bergen.id}' is retired \\(superseded by {lyon.id}\\)"):
        memory.update("ann", bergen.id, "I moved to Oslo")
    assert memory.get("ann", bergen.id).text == "I moved to Bergen last month"
    assert memory.get("ann", bergen.id).status is MemoryStatus.RETIRED
    assert _current(memory, "ann") == ["I live in Lyon"]
    assert [c.action for c in memory.history("ann", bergen.id)] == [MemoryAction.CREATED, MemoryAction.RETIRED]


def test_restoring_beside_the_fact_that_replaced_it_is_refused(memory: MemoryBackend) -> None:
    bergen = memory.remember("ann", "I moved to Bergen last month")
    lyon = memory.remember("ann", "I live in Lyon")
    assert [r.id for r in conflicting_memories(memory, "ann", bergen.id)] == [lyon.id]
    with pytest.raises(InvalidRecordError, match="contradicts the current") as refused:
        restore_memory(memory, "ann", bergen.id)
    assert lyon.id in str(refused.value) and "replace" in str(refused.value)
    assert _current(memory, "ann") == ["I live in Lyon"]
    assert [c.action for c in memory.history("ann", bergen.id)] == [MemoryAction.CREATED, MemoryAction.RETIRED]


def test_restoring_with_replace_retires_the_contradicting_memory_in_the_same_step(memory: MemoryBackend) -> None:
    bergen = memory.remember("ann", "I moved to Bergen last month")
    lyon = memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "My dog is called Rex")
    done = restore_memory(memory, "ann", bergen.id, replace=True, reason="the move fell through")
    assert done.memory.status is MemoryStatus.ACTIVE and done.memory.superseded_by is None
    assert done.retired == (lyon.id,) and done.trimmed == ()
    assert sorted(_current(memory, "ann")) == ["I moved to Bergen last month", "My dog is called Rex"]
    assert memory.get("ann", lyon.id).superseded_by == bergen.id
    history = memory.history("ann", bergen.id)
    assert [c.action for c in history] == [MemoryAction.CREATED, MemoryAction.RETIRED, MemoryAction.RESTORED]
    assert history[-1].reason == "the move fell through"
    assert [c.action for c in memory.history("ann", lyon.id)][-1] is MemoryAction.RETIRED


def test_replace_cuts_only_the_contradicted_fact_out_of_a_memory_stored_whole(memory: MemoryBackend) -> None:
    bergen = memory.remember("ann", "I moved to Bergen last month")
    both = memory.remember("ann", "I live in Lyon and my dog is called Rex")
    assert memory.get("ann", bergen.id).status is MemoryStatus.RETIRED
    done = restore_memory(memory, "ann", bergen.id, replace=True)
    assert done.trimmed == (both.id,) and done.retired == ()
    assert memory.get("ann", both.id).text == "My dog is called Rex"
    assert sorted(_current(memory, "ann")) == ["I moved to Bergen last month", "My dog is called Rex"]


def test_a_memory_nothing_contradicts_is_restored_and_an_active_one_is_refused(memory: MemoryBackend) -> None:
    tea = memory.remember("ann", "I drink tea")
    with pytest.raises(InvalidRecordError, match="already active"):
        restore_memory(memory, "ann", tea.id)
    city = memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "I live in Paris")
    memory.forget("ann", memory.list("ann", include_retired=False)[-1].id)  # Paris is gone: nothing contradicts Lyon
    done = restore_memory(memory, "ann", city.id)
    assert done.memory.status is MemoryStatus.ACTIVE and done.retired == ()
    with pytest.raises(InvalidRecordError, match="no memory"):
        restore_memory(memory, "bob", city.id)  # another user's id is not theirs to restore


def test_history_lists_changes_of_one_instant_in_the_order_they_happened(log: EpisodeLog) -> None:
    # An import creates "I live in Lyon" and retires it for "I moved to Paris" at the same time:
    # the time ties, the order must not (ids that sort at random got it right half the time).
    memory = SQLMemory(log)
    for n in range(12):
        user = f"user-{n}"
        memory.remember_many(user, ["I live in Lyon", "My dog is called Luna", "I moved to Paris"])
        lyon = next(r for r in memory.list(user) if r.text == "I live in Lyon")
        changes = memory.history(user, lyon.id)
        assert changes[0].at == changes[1].at
        assert [c.action for c in changes] == [MemoryAction.CREATED, MemoryAction.RETIRED], user
