"""A restore decided on a stale read is decided again, as an edit is: ``restore_memory`` read the
user's current memories, checked the restored one against them and wrote, unconditionally. A fact
the agent stored between that read and the write ("I live in Bergen", in another process) was never
checked, and the restored "I live in Hobart" went current beside it: two cities, the agent
answering either."""

from __future__ import annotations

import pytest

from memabra import InvalidRecordError, MemoryStatus, SQLMemory
from memabra._facts import RuleFactExtractor
from memabra._memory_restore import restore_memory
from memabra.storage import EpisodeLog


class _MeanwhileTheAgentWrites:
    """Supersession that, the first time the restore consults it, has the agent store a fact (another
    process, between the restore's read and its write), then decides as the rules do."""

    def __init__(self, other: SQLMemory, fact: str) -> None:
        self.other, self.fact, self.done = other, fact, False
        self.rules = RuleFactExtractor()

    def superseded(self, fact: str, existing: list[tuple[str, str]]) -> list[str]:
        if not self.done:
            self.done = True
            self.other.remember("ann", self.fact)
        return self.rules.superseded(fact, existing)


def _current(memory: SQLMemory) -> list[str]:
    return [r.text for r in memory.list("ann", include_retired=False)]


def test_a_restore_decided_on_a_stale_read_is_decided_again(log: EpisodeLog) -> None:
    agent = SQLMemory(log)
    agent.remember("ann", "My dog is called Rex")
    hobart = agent.remember("ann", "I live in Hobart").id
    agent.retire("ann", hobart, reason="wrong, said the user")
    admin = SQLMemory(log, supersession=_MeanwhileTheAgentWrites(agent, "I live in Bergen"))
    with pytest.raises(InvalidRecordError, match="contradicts the current .*'I live in Bergen'"):
        restore_memory(admin, "ann", hobart)
    assert _current(agent) == ["My dog is called Rex", "I live in Bergen"]
    assert agent.get("ann", hobart).status is MemoryStatus.RETIRED


def test_a_restore_with_replace_decided_again_retires_the_fact_stored_meanwhile(log: EpisodeLog) -> None:
    agent = SQLMemory(log)
    agent.remember("ann", "My dog is called Rex")
    hobart = agent.remember("ann", "I live in Hobart").id
    agent.retire("ann", hobart)
    admin = SQLMemory(log, supersession=_MeanwhileTheAgentWrites(agent, "I live in Bergen"))
    restored = restore_memory(admin, "ann", hobart, replace=True)
    assert _current(agent) == ["My dog is called Rex", "I live in Hobart"]
    assert len(restored.retired) == 1
