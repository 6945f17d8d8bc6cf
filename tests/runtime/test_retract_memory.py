"""Feedback ``retract_memory`` ("that's wrong, forget it") retires the memory it names, for the
episode's own user, once, on every path feedback takes (``feedback``, ``afeedback``, the HTTP
route), on SQL memory and on a LangGraph store. Before, it only counted as a correction in the
reward: the memory stayed current and the agent offered it again on the next turn.

The feedback is always stored (the correction counts in the reward): a memory id that is not the
episode user's current memory (unknown, another user's, retired or superseded since) retires
nothing, and the receipt's ``retired_memory`` says which memory the feedback retired (None then).
Before, such an id refused the whole feedback, and a user who pressed "that's wrong" on an old
turn whose memory was superseded meanwhile lost the correction."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore
from starlette.requests import Request
from starlette.testclient import TestClient

from memabra import (
    MemoryBackend,
    MemoryStatus,
    RoutingSession,
    SQLMemory,
    StoreMemory,
    feedback_app,
)
from memabra._build import build_session
from memabra._records import new_id
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@pytest.fixture(params=["sql", "store"])
def session(request: pytest.FixtureRequest, log: EpisodeLog) -> Iterator[RoutingSession]:
    memory = None if request.param == "sql" else StoreMemory(InMemoryStore(), log=log)
    router = HybridRouter(similarity=Similarity(encoder=None))
    s = build_session(tools=[get_weather], db=log, router=router, memory=memory, learn=False)
    yield s
    s.close()


def _episode(session: RoutingSession, user: str, query: str = "where do I live?") -> str:
    turn = session.begin(user_id=user, query=query, thread_id=new_id())
    return session.finish(turn.id, "in Hobart")


def _explicit(log: EpisodeLog, episode_id: str) -> list[object]:
    """The feedback a person sent (not the runtime's own usage feedback)."""
    return [f for f in log.feedback_for(episode_id, include_late=True) if f.kind.value == "explicit"]


def _current(memory: MemoryBackend, user: str) -> list[str]:
    return [r.text for r in memory.list(user, include_retired=False)]


def test_a_retracted_memory_is_retired_and_no_longer_offered(session: RoutingSession, log: EpisodeLog) -> None:
    wrong = session.memory.remember("ann", "I live in Hobart")
    session.memory.remember("ann", "My dog is called Rex")
    episode_id = _episode(session, "ann")
    assert wrong.id in {i.id for i in session.memory.recall("ann", "where do I live?")}

    receipt = session.feedback(episode_id, retract_memory=wrong.id)

    assert receipt.status == "stored"
    record = session.memory.get("ann", wrong.id)
    assert record.status is MemoryStatus.RETIRED and record.text == "I live in Hobart"  # kept, restorable
    last = session.memory.history("ann", wrong.id)[-1]
    reason = f"retracted by the user on episode {episode_id}"
    assert (last.action.value, last.episode_id, last.reason) == ("retired", episode_id, reason)
    assert _current(session.memory, "ann") == ["My dog is called Rex"]
    assert wrong.id not in {i.id for i in session.memory.recall("ann", "where do I live?")}
    # still a correction in the reward, as before
    reward = log.get_reward(episode_id)
    assert reward is not None and reward.components.c > 0


def test_a_resent_retraction_retires_once_and_is_not_refused(session: RoutingSession, log: EpisodeLog) -> None:
    wrong = session.memory.remember("ann", "I live in Hobart")
    episode_id = _episode(session, "ann")
    first = session.feedback(episode_id, retract_memory=wrong.id, idempotency_key="k1")
    again = session.feedback(episode_id, retract_memory=wrong.id, idempotency_key="k1")
    assert (first.status, again.status) == ("stored", "duplicate")
    resent = session.feedback(episode_id, retract_memory=wrong.id)  # a second click, no key
    assert resent.status == "stored"
    retirements = [c for c in session.memory.history("ann", wrong.id) if c.action.value == "retired"]
    assert len(retirements) == 1


def test_a_retraction_restored_by_hand_is_not_retired_again_by_a_retry(session: RoutingSession) -> None:
    from memabra._memory_restore import restore_memory

    wrong = session.memory.remember("ann", "I live in Hobart")
    episode_id = _episode(session, "ann")
    session.feedback(episode_id, retract_memory=wrong.id, idempotency_key="k1")
    restore_memory(session.memory, "ann", wrong.id, reason="ticket 12: it was right")
    session.feedback(episode_id, retract_memory=wrong.id, idempotency_key="k1")  # a late retry
    assert session.memory.get("ann", wrong.id).status is MemoryStatus.ACTIVE


def test_a_retraction_of_another_users_or_an_unknown_memory_is_stored_and_retires_nothing(
    session: RoutingSession, log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    bobs = session.memory.remember("bob", "I live in Oslo")
    episode_id = _episode(session, "ann")
    for n, memory_id in enumerate((bobs.id, "mem:nosuchmemory"), start=1):
        caplog.clear()
        with caplog.at_level("INFO", logger="memabra"):
            receipt = session.feedback(episode_id, retract_memory=memory_id, rating=1)
        assert (receipt.status, receipt.retired_memory) == ("stored", None)
        assert f"retracts {memory_id!r}, which is no memory of user ann" in caplog.text
        assert len(_explicit(log, episode_id)) == n
    assert session.memory.get("bob", bobs.id).status is MemoryStatus.ACTIVE
    assert [c.action.value for c in session.memory.history("bob", bobs.id)] == ["created"]
    reward = log.get_reward(episode_id)
    assert reward is not None and reward.components.c > 0  # the correction still counts


def test_a_retraction_of_a_memory_superseded_since_keeps_the_correction(
    session: RoutingSession, log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    """The user pressed "that's wrong" on an old turn whose memory was replaced meanwhile."""
    old = session.memory.remember("ann", "I live in Hobart")
    episode_id = _episode(session, "ann")
    new = session.memory.remember("ann", "I moved to Oslo")
    with caplog.at_level("INFO", logger="memabra"):
        receipt = session.feedback(episode_id, retract_memory=old.id)
    assert (receipt.status, receipt.retired_memory) == ("stored", None)
    assert f"retracts memory {old.id} of user ann, superseded by {new.id} since" in caplog.text
    assert len(_explicit(log, episode_id)) == 1
    reward = log.get_reward(episode_id)
    assert reward is not None and reward.components.c > 0
    assert [c.action.value for c in session.memory.history("ann", old.id)] == ["created", "retired"]
    assert session.memory.get("ann", new.id).status is MemoryStatus.ACTIVE


def test_the_receipt_names_the_memory_retired_and_a_retry_answers_the_same(session: RoutingSession) -> None:
    wrong = session.memory.remember("ann", "I live in Hobart")
    episode_id = _episode(session, "ann")
    assert session.feedback(episode_id, rating=4).retired_memory is None
    first = session.feedback(episode_id, retract_memory=wrong.id, idempotency_key="k1")
    again = session.feedback(episode_id, retract_memory=wrong.id, idempotency_key="k1")
    assert (first.retired_memory, again.retired_memory) == (wrong.id, wrong.id)


def test_a_retraction_with_a_correction_retires_the_memory_before_the_fact_replaces_it(
    session: RoutingSession,
) -> None:
    """The correction's fact would supersede the retracted memory first, and the receipt would say
    nothing was retracted."""
    wrong = session.memory.remember("ann", "I live in Hobart")
    episode_id = _episode(session, "ann")
    receipt = session.feedback(episode_id, retract_memory=wrong.id, correction="I live in Oslo")
    assert receipt.retired_memory == wrong.id
    last = session.memory.history("ann", wrong.id)[-1]
    assert last.reason == f"retracted by the user on episode {episode_id}"
    assert _current(session.memory, "ann") == ["I live in Oslo"]


def test_afeedback_retracts_too(session: RoutingSession) -> None:
    wrong = session.memory.remember("ann", "I live in Hobart")
    episode_id = _episode(session, "ann")
    asyncio.run(session.afeedback(episode_id, retract_memory=wrong.id))
    assert session.memory.get("ann", wrong.id).status is MemoryStatus.RETIRED


def _header_user(request: Request) -> str | None:
    return request.headers.get("x-user")


def test_the_http_route_retracts_the_users_own_memory_and_not_anothers(
    session: RoutingSession, log: EpisodeLog
) -> None:
    wrong = session.memory.remember("ann", "I live in Hobart")
    bobs = session.memory.remember("bob", "I live in Oslo")
    episode_id = _episode(session, "ann")
    with TestClient(feedback_app(session, user=_header_user)) as client:

        def post(memory_id: str, key: str) -> tuple[int, dict[str, object]]:
            answer = client.post(
                f"/episodes/{episode_id}/feedback",
                json={"retract_memory": memory_id},
                headers={"x-user": "ann", "idempotency-key": key},
            )
            return answer.status_code, answer.json()

        answers = [post(bobs.id, "a"), post("mem:nosuchmemory", "c")]
        # stored as a correction; another user's id answers as an unknown one (no probing)
        assert [(code, body["status"], body["retired_memory"]) for code, body in answers] == [(200, "stored", None)] * 2
        assert session.memory.get("bob", bobs.id).status is MemoryStatus.ACTIVE
        assert len(_explicit(log, episode_id)) == 2

        code, body = post(wrong.id, "b")
        assert (code, body["status"], body["retired_memory"]) == (200, "stored", wrong.id)
        assert session.memory.get("ann", wrong.id).status is MemoryStatus.RETIRED
        code, body = post(wrong.id, "b")  # the UI's retry
        assert (code, body["status"], body["retired_memory"]) == (200, "duplicate", wrong.id)
    assert len([c for c in session.memory.history("ann", wrong.id) if c.action.value == "retired"]) == 1


def test_a_backend_that_cannot_retire_stores_the_feedback_and_says_so(
    log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    """A backend of one's own without ``retire`` (the six primitives hold none): the feedback is
    stored as before (a correction), and a warning names the memory that stays current."""

    class _NoRetire(SQLMemory):
        retire = MemoryBackend.retire  # as a backend of one's own that has none

    memory = _NoRetire(log)
    router = HybridRouter(similarity=Similarity(encoder=None))
    s = build_session(tools=[get_weather], db=log, router=router, memory=memory, learn=False)
    try:
        wrong = memory.remember("ann", "I live in Hobart")
        episode_id = _episode(s, "ann")
        with caplog.at_level("WARNING", logger="memabra"):
            receipt = s.feedback(episode_id, retract_memory=wrong.id)
        assert (receipt.status, receipt.retired_memory) == ("stored", None)
        assert f"retracts memory {wrong.id}, but _NoRetire cannot retire a memory" in caplog.text
        assert memory.get("ann", wrong.id).status is MemoryStatus.ACTIVE
    finally:
        s.close()


def test_memabra_feedback_retires_by_the_same_rule(log: EpisodeLog, migrated_url: str, tmp_path: Path) -> None:
    """``memabra feedback`` posted straight to the reward service: its retract_memory counted as a
    correction and retired nothing, so the agent offered the memory again on the next turn."""
    import json

    from typer.testing import CliRunner

    from memabra._cli import app

    memory = SQLMemory(log)
    wrong = memory.remember("ann", "I live in Hobart")
    bobs = memory.remember("bob", "I live in Oslo")
    router = HybridRouter(similarity=Similarity(encoder=None))
    s = build_session(tools=[get_weather], db=log, router=router, memory=memory, learn=False)
    try:
        episode_id = _episode(s, "ann")
    finally:
        s.close()
    runner = CliRunner(env={"COLUMNS": "200"})

    def post(memory_id: str, key: str, out: Path) -> tuple[str, dict[str, object]]:
        payload = json.dumps({"retract_memory": memory_id})
        args = ["feedback", episode_id, payload, "--db", migrated_url, "--idempotency-key", key, "--json", str(out)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split()), json.loads(out.read_text())

    out = tmp_path / "receipt.json"
    said, body = post(bobs.id, "a", out)
    assert (body["status"], body["retired_memory"]) == ("stored", None)
    assert f"memory {bobs.id} was not retired" in said and "still counts as a correction" in said
    assert memory.get("bob", bobs.id).status is MemoryStatus.ACTIVE

    said, body = post(wrong.id, "b", out)
    assert (body["status"], body["retired_memory"]) == ("stored", wrong.id)
    assert f"memory {wrong.id} retired" in said
    assert memory.get("ann", wrong.id).status is MemoryStatus.RETIRED
    assert memory.history("ann", wrong.id)[-1].reason == f"retracted by the user on episode {episode_id}"
    _, body = post(wrong.id, "b", out)  # a retry
    assert (body["status"], body["retired_memory"]) == ("duplicate", wrong.id)
    assert len([c for c in memory.history("ann", wrong.id) if c.action.value == "retired"]) == 1
    assert len(_explicit(log, episode_id)) == 2
