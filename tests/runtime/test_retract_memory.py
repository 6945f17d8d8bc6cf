"""Feedback ``retract_memory`` ("that's wrong, forget it") retires the memory it names, for the
episode's own user, once, on every path feedback takes (``feedback``, ``afeedback``, the HTTP
route), on SQL memory and on a LangGraph store. Before, it only counted as a correction in the
reward: the memory stayed current and the agent offered it again on the next turn.

A memory id the episode's user has no current memory under (unknown, another user's, retired
already) refuses the feedback naming the id, and nothing is stored."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore
from starlette.requests import Request
from starlette.testclient import TestClient

from memabra import (
    InvalidFeedbackError,
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


def test_a_retraction_of_another_users_or_an_unknown_memory_is_refused_and_stores_nothing(
    session: RoutingSession, log: EpisodeLog
) -> None:
    bobs = session.memory.remember("bob", "I live in Oslo")
    episode_id = _episode(session, "ann")
    for memory_id in (bobs.id, "mem:nosuchmemory"):
        with pytest.raises(InvalidFeedbackError, match=f"retract_memory.*no memory '{memory_id}'.*nothing was stored"):
            session.feedback(episode_id, retract_memory=memory_id, rating=1)
    assert session.memory.get("bob", bobs.id).status is MemoryStatus.ACTIVE
    assert [c.action.value for c in session.memory.history("bob", bobs.id)] == ["created"]
    assert _explicit(log, episode_id) == []


def test_a_retraction_of_a_memory_retired_already_is_refused(session: RoutingSession, log: EpisodeLog) -> None:
    old = session.memory.remember("ann", "I live in Hobart")
    new = session.memory.remember("ann", "I moved to Oslo")
    episode_id = _episode(session, "ann")
    with pytest.raises(InvalidFeedbackError, match=f"memory '{old.id}' is already retired \\(superseded by {new.id}"):
        session.feedback(episode_id, retract_memory=old.id)
    assert _explicit(log, episode_id) == []
    assert [c.action.value for c in session.memory.history("ann", old.id)] == ["created", "retired"]


def test_afeedback_retracts_too(session: RoutingSession) -> None:
    wrong = session.memory.remember("ann", "I live in Hobart")
    episode_id = _episode(session, "ann")
    asyncio.run(session.afeedback(episode_id, retract_memory=wrong.id))
    assert session.memory.get("ann", wrong.id).status is MemoryStatus.RETIRED


def _header_user(request: Request) -> str | None:
    return request.headers.get("x-user")


def test_the_http_route_retracts_the_users_own_memory_and_refuses_anothers(
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

        code, body = post(bobs.id, "a")
        assert code == 400 and f"no memory '{bobs.id}'" in str(body["detail"])
        assert session.memory.get("bob", bobs.id).status is MemoryStatus.ACTIVE
        assert _explicit(log, episode_id) == []

        code, body = post(wrong.id, "b")
        assert code == 200 and body["status"] == "stored"
        assert session.memory.get("ann", wrong.id).status is MemoryStatus.RETIRED
        code, body = post(wrong.id, "b")  # the UI's retry
        assert code == 200 and body["status"] == "duplicate"
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
            assert s.feedback(episode_id, retract_memory=wrong.id).status == "stored"
        assert f"retracts memory {wrong.id}, but _NoRetire cannot retire a memory" in caplog.text
        assert memory.get("ann", wrong.id).status is MemoryStatus.ACTIVE
    finally:
        s.close()
