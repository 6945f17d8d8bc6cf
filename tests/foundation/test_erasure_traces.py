"""What an erasure must leave none of: the user's text wherever the log keeps it beyond their
episodes and memories (stored embeddings, their own skills and tools), on every configured backend."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from langgraph.store.memory import InMemoryStore
from typer.testing import CliRunner

from factories import uniform_selection
from memabra import Candidate, CandidateKind, Episode, SQLMemory, StoreMemory, erase_user
from memabra._cli import app
from memabra._memory import MemoryBackend
from memabra._records_listing import RegistryItem
from memabra.storage import EmbeddingTable, EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})


def _offered(log: EpisodeLog, user: str, memory_id: str, text: str) -> None:
    """An episode of ``user`` that offered a memory the memory backend no longer holds (deleted
    from its store behind memabra's back): the log is the only place its text is known."""
    offered = [Candidate(memory_id, CandidateKind.MEMORY, text, 5)]
    selection = uniform_selection(user, offered, [memory_id], query="where do I live?")
    log.log_episode(Episode(user_id=user, query="where do I live?", selections=(selection,)))


def _backend(name: str, log: EpisodeLog) -> MemoryBackend:
    return SQLMemory(log) if name == "sql" else StoreMemory(InMemoryStore(), log=log)


@pytest.mark.parametrize("backend", ["sql", "store"])
def test_an_erasure_deletes_the_embeddings_of_memory_texts_only_the_log_still_knows(
    log: EpisodeLog, backend: str
) -> None:
    ann, bob = "I live in Quixotown near the zebrafjord", "I live in Oslo"
    _offered(log, "ann", "mem:ann-home", ann)
    _offered(log, "bob", "mem:bob-home", bob)
    table = EmbeddingTable(log.engine)
    table.save("enc", {ann: np.ones(4, dtype=np.float32), bob: np.ones(4, dtype=np.float32)})
    result = erase_user(log, "ann", memory=_backend(backend, log))
    assert (result.episodes, result.memories) == (1, 0)
    assert set(table.load("enc", [ann, bob])) == {bob}  # no vector of ann's sentence is left


def _own(owner: str, kind: CandidateKind, name: str, text: str) -> RegistryItem:
    return RegistryItem(kind=kind, id=f"{kind.value}:{name}", owner=owner, name=name, text=text, tokens=5)


def test_an_erasure_deletes_the_users_own_skills_and_tools_and_keeps_shared_ones(log: EpisodeLog) -> None:
    private = "draft ann's letters to her landlord in Quixotown"
    log.put_items(
        [
            _own("ann", CandidateKind.SKILL, "landlord", private),
            _own("ann", CandidateKind.TOOL, "ann-calendar", "ann's calendar at Quixotown clinic"),
            _own("", CandidateKind.SKILL, "summarise", "summarise a document"),
            _own("bob", CandidateKind.SKILL, "bob-notes", "bob's notes"),
        ]
    )
    log.delete_item(CandidateKind.TOOL, "ann", "tool:ann-calendar")  # soft-deleted: its text is still stored
    table = EmbeddingTable(log.engine)
    table.save("enc", {private: np.ones(4, dtype=np.float32)})
    result = erase_user(log, "ann")
    assert result.items == 2 and not result.found_nothing
    assert [i.id for i in log.items("ann")] == ["skill:summarise"]
    assert {i.id for i in log.items("bob")} == {"skill:summarise", "skill:bob-notes"}
    assert table.load("enc", [private]) == {}
    with log.engine.connect() as conn:
        from sqlalchemy import text

        assert conn.execute(text("SELECT count(*) FROM registry WHERE owner = 'ann'")).scalar() == 0
    assert erase_user(log, "ann").found_nothing  # a second run finds nothing left


def test_an_erasure_deletes_the_embeddings_of_earlier_versions_of_the_users_own_skills(log: EpisodeLog) -> None:
    # ann's own skill, described in her words, offered in a turn of hers, then described anew: no
    # registry row holds the first description any more, but her logged candidate does
    first, edited = "draft ann's letters to her landlord in Quixotown", "draft ann's letters"
    log.put_items([_own("ann", CandidateKind.SKILL, "landlord", first)])
    (item,) = (i for i in log.items("ann", CandidateKind.SKILL) if i.owner == "ann")
    selection = uniform_selection("ann", [item.as_candidate()], [item.id], query="write to my landlord")
    log.log_episode(Episode(user_id="ann", query="write to my landlord", selections=(selection,)))
    log.put_items([_own("ann", CandidateKind.SKILL, "landlord", edited)])
    table = EmbeddingTable(log.engine)
    table.save("enc", {first: np.ones(4, dtype=np.float32), edited: np.ones(4, dtype=np.float32)})
    erase_user(log, "ann")
    assert table.load("enc", [first, edited]) == {}  # before: the first description's vector stayed


def test_cli_names_the_users_own_skills_it_deleted(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log.put_items([_own("ann", CandidateKind.SKILL, "landlord", "letters to ann's landlord")])
    receipt = tmp_path / "erasure.json"
    out = runner.invoke(app, ["erase", "--user", "ann", "--db", migrated_url, "--json", str(receipt)])
    assert out.exit_code == 0, out.output
    assert "1 own skill(s)/tool(s) deleted" in out.output and "held nothing" not in out.output
    assert json.loads(receipt.read_text())["items"] == 1


def test_rerunning_an_interrupted_erasure_says_it_finished_it(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        _offered(log, "ann", "mem:ann-home", "I live in Quixotown")
        SQLMemory(log).remember("ann", "My dog is called Rex")

        def dies() -> int:
            raise KeyboardInterrupt  # killed between the episodes and the memories

        with pytest.raises(KeyboardInterrupt):
            log.erase_user("ann", dies, actor="cli:ops")
        (dead,) = log.status().unfinished_deletions
    receipt = tmp_path / "erasure.json"
    out = runner.invoke(app, ["erase", "--user", "ann", "--db", migrated_url, "--json", str(receipt)])
    assert out.exit_code == 0, out.output
    assert f"this run finished 1 earlier erasure(s) of ann that stopped part way: {dead.id}" in out.output
    assert "1 memories forgotten" in out.output and "held nothing" not in out.output
    assert json.loads(receipt.read_text())["resumed"] == [dead.id]
    with EpisodeLog(migrated_url) as log:
        assert log.status().unfinished_deletions == () and SQLMemory(log).list("ann") == []
        assert erase_user(log, "ann").resumed == ()  # nothing left unfinished to finish
