"""Review of editing a memory by hand (``edit_memory``, ``memabra memories update|retire|restore``):
an edit decided on a stale read never leaves two current values of a subject, a backend of your
own that implements only the abstract primitives can be edited, and a reason is never cut short
(nor its "by") in the history, nor stored with a terminal's escape sequences."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

from memabra import (
    CandidateKind,
    InvalidRecordError,
    MemoryBackend,
    MemoryChange,
    MemoryRecord,
    MemoryStatus,
    RegistryItem,
    SQLMemory,
)
from memabra._cli import app
from memabra._facts import RuleFactExtractor
from memabra._memory_write import ContradictsCurrentError, edit_memory
from memabra.storage import EpisodeLog, upgrade

runner = CliRunner(env={"COLUMNS": "200"})


class _MeanwhileTheAgentWrites:
    """Supersession that, the first time an edit consults it, lets the agent store what the user
    just said (another process, between the edit's read and its write), then decides as the rules do."""

    def __init__(self, other: SQLMemory, user: str, fact: str) -> None:
        self.other, self.user, self.fact = other, user, fact
        self.rules = RuleFactExtractor()
        self.done = False

    def superseded(self, fact: str, existing: Sequence[tuple[str, str]]) -> list[str]:
        if not self.done:
            self.done = True
            self.other.remember(self.user, self.fact)
        return self.rules.superseded(fact, existing)


def test_an_edit_decided_on_a_stale_read_is_decided_again(log: EpisodeLog) -> None:
    agent = SQLMemory(log)
    hobart = agent.remember("ann", "I live in Hobart").id
    plan = agent.remember("ann", "I'm planning to move to Oslo").id
    admin = SQLMemory(log, supersession=_MeanwhileTheAgentWrites(agent, "ann", "I live in Bergen"))

    done = edit_memory(admin, "ann", plan, "I live in Oslo", replace=True, reason="ticket 4182")

    # the edit saw Bergen on its second read, and retired it in the same write as the edit
    assert [r.text for r in agent.list("ann", include_retired=False)] == ["I live in Oslo"]
    bergen = next(r for r in agent.list("ann") if r.text == "I live in Bergen")
    assert done.retired == (bergen.id,) and bergen.superseded_by == plan
    assert agent.get("ann", hobart).superseded_by == bergen.id  # the agent's own supersession stands


class _DictMemory(MemoryBackend):
    """A backend of one's own (docs/memory.md): the abstract primitives and nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, MemoryRecord]] = {}
        self.changes: dict[tuple[str, str], list[MemoryChange]] = {}

    def items(self, user_id: str) -> list[RegistryItem]:
        return [
            RegistryItem(CandidateKind.MEMORY, r.id, user_id, r.text, 1, created_at=r.created_at)
            for r in self.records(user_id, include_retired=False)
        ]

    def records(self, user_id: str, *, include_retired: bool = True) -> list[MemoryRecord]:
        rows = sorted(self.rows.setdefault(user_id, {}).values(), key=lambda r: (r.created_at, r.id))
        return [r for r in rows if include_retired or r.status is MemoryStatus.ACTIVE]

    def history(self, user_id: str, memory_id: str) -> list[MemoryChange]:
        return list(self.changes[user_id, memory_id])

    def _store(
        self,
        item: RegistryItem,
        change: MemoryChange,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[MemoryChange] = (),
    ) -> None:
        rows = self.rows.setdefault(item.owner, {})
        old = rows.get(item.id)
        created = old.created_at if old else change.at
        rows[item.id] = MemoryRecord(item.id, item.owner, item.text, MemoryStatus.ACTIVE, created, change.at)
        for c in retire:
            rows[c.memory_id] = replace(rows[c.memory_id], status=MemoryStatus.RETIRED, superseded_by=item.id)
        for c in (change, *retire, *cut):
            self.changes.setdefault((item.owner, c.memory_id), []).append(c)

    def _refresh(self, change: MemoryChange) -> None:
        rows = self.rows[change.user_id]
        rows[change.memory_id] = replace(rows[change.memory_id], text=change.new_text or "", updated_at=change.at)
        self.changes[change.user_id, change.memory_id].append(change)

    def _forget(self, user_id: str, memory_ids: Sequence[str] | None) -> int:
        raise NotImplementedError


def test_a_backend_of_ones_own_is_edited_by_the_same_rule() -> None:
    memory = _DictMemory()
    hobart = memory.remember("ann", "I live in Hobart").id
    plan = memory.remember("ann", "I'm planning to move to Oslo").id
    with pytest.raises(ContradictsCurrentError, match="contradicts the current"):
        edit_memory(memory, "ann", plan, "I live in Oslo")
    done = edit_memory(memory, "ann", plan, "I live in Oslo", replace=True, reason="ticket 4182 (by sam)")
    assert done.retired == (hobart,) and [r.text for r in memory.list("ann", include_retired=False)] == [
        "I live in Oslo"
    ]
    assert memory.history("ann", plan)[-1].reason == "ticket 4182 (by sam)"


def test_a_reason_the_history_cannot_hold_is_refused_not_cut(log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    plan = memory.remember("ann", "I'm planning to move to Oslo").id
    with pytest.raises(InvalidRecordError, match=r"keeps at most 200: shorten it by 1\b"):
        edit_memory(memory, "ann", plan, "I live in Oslo", reason="x" * 201)
    with pytest.raises(InvalidRecordError, match="control character"):
        edit_memory(memory, "ann", plan, "I live in Oslo", reason="ticket \x1b[2J4182")
    assert memory.get("ann", plan).text == "I'm planning to move to Oslo"  # nothing written
    edit_memory(memory, "ann", plan, "I live in Oslo", reason=" ticket 4182:\n\tmoved ")
    assert memory.history("ann", plan)[-1].reason == "ticket 4182: moved"


@pytest.fixture
def url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def _memories(*args: str) -> Any:
    return runner.invoke(app, ["memories", *args])


@pytest.mark.parametrize("command", ["update", "retire"])
def test_the_cli_refuses_a_reason_whose_by_the_history_would_cut(url: str, command: str) -> None:
    assert _memories("add", "I'm planning to move to Oslo", "--user", "ann", "--db", url).exit_code == 0
    listed = _memories("list", "--user", "ann", "--db", url, "--json", "-")
    mid = json.loads(listed.stdout)[0]["id"]
    new_text = ["I live in Oslo"] if command == "update" else []
    reason = "ticket 4182: " + "the user wrote in to say so " * 7  # 195 characters: fits without the by
    refused = _memories(command, mid, *new_text, "--user", "ann", "--db", url, "--reason", reason, "--by", "sam")
    assert refused.exit_code == 1 and "keeps at most 200" in refused.output and "Traceback" not in refused.output
    history = json.loads(_memories("history", mid, "--user", "ann", "--db", url, "--json", "-").stdout)
    assert [c["action"] for c in history] == ["created"]  # nothing written
    short = _memories(command, mid, *new_text, "--user", "ann", "--db", url, "--reason", "ticket 4182", "--by", "sam")
    assert short.exit_code == 0, short.output
    history = json.loads(_memories("history", mid, "--user", "ann", "--db", url, "--json", "-").stdout)
    assert history[-1]["reason"] == "ticket 4182 (by sam)"
