"""``memabra feedback`` with a ``retract_memory``: what it prints must be true, and printing it
must not fail after the feedback is stored.

Before, a database failure between storing the feedback and retiring the memory was printed as
"it is not a current memory of the episode's user": the operator, told the id was wrong, left a
wrong memory recalled, when rerunning with the same key would have retired it. And the id, the
caller's own text, was read as Rich markup: ``"[/x]"`` raised a MarkupError (a traceback, exit 1)
after the feedback was stored, so a retry sent the correction twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from memabra import MemoryStatus, SQLMemory
from memabra._build import build_session
from memabra._records import new_id
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def _episode(log: EpisodeLog, memory: SQLMemory) -> str:
    router = HybridRouter(similarity=Similarity(encoder=None))
    s = build_session(tools=[get_weather], db=log, router=router, memory=memory, learn=False)
    try:
        turn = s.begin(user_id="ann", query="where do I live?", thread_id=new_id())
        return s.finish(turn.id, "in Hobart")
    finally:
        s.close()


def _post(url: str, episode_id: str, memory_id: str, key: str, out: Path) -> tuple[int, str, dict[str, Any]]:
    from memabra._cli import app

    payload = json.dumps({"retract_memory": memory_id})
    args = ["feedback", episode_id, payload, "--db", url, "--idempotency-key", key, "--json", str(out)]
    result = CliRunner(env={"COLUMNS": "300"}).invoke(app, args)
    body = json.loads(out.read_text()) if out.exists() else {}
    return result.exit_code, " ".join(result.output.split()), body


def test_a_failure_to_retire_is_not_reported_as_an_id_that_is_no_memory(
    log: EpisodeLog, migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = SQLMemory(log)
    wrong = memory.remember("ann", "I live in Hobart")
    episode_id = _episode(log, memory)

    def outage(self: SQLMemory, *args: object, **kwargs: object) -> object:
        raise OperationalError("UPDATE registry", {}, Exception("server closed the connection unexpectedly"))

    with monkeypatch.context() as m:
        m.setattr(SQLMemory, "retire", outage)
        code, said, body = _post(migrated_url, episode_id, wrong.id, "k", tmp_path / "a.json")
    assert code == 0, said
    assert (body["status"], body["retired_memory"]) == ("stored", None)
    assert f"memory {wrong.id} was not retired: retiring it failed" in said
    assert "[SQL: UPDATE registry]" in said  # the error, printed as it reads
    assert "not a current memory" not in said
    assert "same --idempotency-key" in said
    assert memory.get("ann", wrong.id).status is MemoryStatus.ACTIVE

    # the remedy it names works: the retry is a duplicate (one correction) and retires it
    code, said, body = _post(migrated_url, episode_id, wrong.id, "k", tmp_path / "b.json")
    assert code == 0, said
    assert (body["status"], body["retired_memory"]) == ("duplicate", wrong.id)
    assert memory.get("ann", wrong.id).status is MemoryStatus.RETIRED


def test_a_retracted_id_is_printed_as_text_never_read_as_markup(
    log: EpisodeLog, migrated_url: str, tmp_path: Path
) -> None:
    memory = SQLMemory(log)
    memory.remember("ann", "I live in Hobart")
    episode_id = _episode(log, memory)
    code, said, body = _post(migrated_url, episode_id, "[/x] [bold]y", "k", tmp_path / "a.json")
    assert code == 0, said
    assert (body["status"], body["retired_memory"]) == ("stored", None)
    assert "memory [/x] [bold]y was not retired: it is not a current memory" in said
    assert len([f for f in log.feedback_for(episode_id, include_late=True) if f.kind.value == "explicit"]) == 1
