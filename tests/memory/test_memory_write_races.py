"""Two writers of one user's memories on the SQL registry: a write decided on a read that another
writer changed before it committed is decided again, so two new values of one subject never both
stay current (before, "I live in Hobart" and "I live in Paris", written at once by an import and
an agent, were both current, and "I live in Lyon" was retired twice)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from memabra import MemoriesChangedError, SQLMemory
from memabra._facts import RuleFactExtractor
from memabra.storage import EpisodeLog

USER = "ann"


class _WritesMeanwhile(RuleFactExtractor):
    """Supersession that has ``other`` write to the same user while this backend decides its write,
    after it read: another process's write landing between the read and the commit."""

    def __init__(self, other: SQLMemory, texts: Sequence[str]) -> None:
        super().__init__()
        self.other, self.texts = other, list(texts)

    def superseded(self, fact: str, existing: Sequence[tuple[str, str]]) -> list[str]:
        if self.texts:
            self.other.remember(USER, self.texts.pop(0))
        return super().superseded(fact, existing)


def _current(memory: SQLMemory) -> list[str]:
    return sorted(r.text for r in memory.list(USER, include_retired=False))


@pytest.mark.parametrize("how", ["remember", "remember_many"])
def test_a_write_decided_on_a_read_another_writer_changed_is_decided_again(migrated_url: str, how: str) -> None:
    with EpisodeLog(migrated_url) as agent_log, EpisodeLog(migrated_url) as import_log:
        agent = SQLMemory(agent_log)
        agent.remember(USER, "I live in Lyon")
        importer = SQLMemory(import_log, supersession=_WritesMeanwhile(agent, ["I live in Paris"]))
        if how == "remember":
            importer.remember(USER, "I live in Hobart")
        else:
            importer.remember_many(USER, ["I like tea", "I live in Hobart"])
        assert [t for t in _current(importer) if "live" in t] == ["I live in Hobart"]
        lyon = next(r for r in importer.list(USER) if r.text == "I live in Lyon")
        assert [c.action.value for c in importer.history(USER, lyon.id)] == ["created", "retired"]


def test_a_user_written_without_pause_elsewhere_is_refused_naming_it(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as agent_log, EpisodeLog(migrated_url) as import_log:
        agent = SQLMemory(agent_log)
        agent.remember(USER, "I live in Lyon")
        every_time = [f"I live in City{i}" for i in range(20)]
        importer = SQLMemory(import_log, supersession=_WritesMeanwhile(agent, every_time))
        with pytest.raises(MemoriesChangedError, match="'ann''s memories changed since the read"):
            importer.remember(USER, "I live in Hobart")
        assert "I live in Hobart" not in _current(importer)  # nothing half-written
        assert len([t for t in _current(importer) if "live" in t]) == 1


def test_writers_in_parallel_leave_one_current_value(migrated_url: str) -> None:
    cities = [f"I live in City{i}" for i in range(8)]
    logs = [EpisodeLog(migrated_url) for _ in cities]
    try:
        SQLMemory(logs[0]).remember(USER, "I live in Lyon")
        start = threading.Barrier(len(cities))
        errors: list[BaseException] = []

        def write(k: int) -> None:
            memory = SQLMemory(logs[k])
            start.wait()
            try:
                memory.remember(USER, cities[k])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(len(cities))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len([t for t in _current(SQLMemory(logs[0])) if "live" in t]) == 1
    finally:
        for log in logs:
            log.close()
