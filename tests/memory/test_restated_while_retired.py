"""A user restates a fact in one process while another process retires the memory holding it
(the user stated a new value there): the restatement is stored as the current value instead of
failing the turn after its episode was logged (``memory '...' is retired``, seen by
``benchmarks/crash_audit.py`` in 2 agent processes sharing users)."""

from __future__ import annotations

import pytest

from memabra import MemoryStatus
from memabra._memory import MemoryAction, MemoryBackend


def test_a_restatement_of_a_memory_retired_meanwhile_is_stored_as_the_current_fact(
    memory: MemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    lyon = memory.remember("ann", "I live in Lyon")
    read_before = memory._read_active("ann")
    oslo = memory.remember("ann", "I live in Oslo")  # the other process, between the read and the write
    assert memory.get("ann", lyon.id).status is MemoryStatus.RETIRED
    stale = [read_before]
    fresh = memory._read_active
    monkeypatch.setattr(memory, "_read_active", lambda user: stale.pop() if stale else fresh(user))

    again = memory.remember("ann", "I live in Lyon")

    assert again.id not in (lyon.id, oslo.id) and again.text == "I live in Lyon"
    assert [r.text for r in memory.list("ann", include_retired=False)] == ["I live in Lyon"]
    # the retired memory is left as it was: no restatement recorded on it
    assert [c.action for c in memory.history("ann", lyon.id)] == [MemoryAction.CREATED, MemoryAction.RETIRED]
