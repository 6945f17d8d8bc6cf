"""``RoutingSession``'s async twins, for a server that drives the session from coroutines without
LangGraph's agent: each takes its sync form's arguments and returns or raises what it does, and
none runs a statement on the event loop's thread (the slowed log of ``test_event_loop_stall``:
each statement takes ``DELAY_S``, and one made on the loop is named). Cancelled, a twin finishes
its work whole before the caller sees the cancellation: a cancelled ``afinish`` has logged its
episode, once."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from runtime.test_event_loop_stall import DELAY_S, SlowLog, _router, get_weather
from runtime.test_event_loop_stall import slow_fixture as slow_fixture  # noqa: F401 - the fixture slow, shared

from memabra import InvalidRecordError
from memabra._build import build_session
from memabra._session import RoutingSession
from memabra.storage import EpisodeLog

USER = "ann"
TURNS = 3
TWINS = (
    "begin",
    "resume",
    "kept_turn",
    "suspend",
    "unpause",
    "record_model_call",
    "record_tool_call",
    "finish",
    "abandon",
    "feedback",
    "learn_pending",
    "save_snapshot",
    "close",
)


def _session(log: EpisodeLog) -> RoutingSession:
    session = build_session(tools=[get_weather], db=log, router=_router())
    session.memory.remember(USER, "I live in Lyon")
    return session


def test_each_twin_takes_its_sync_forms_arguments() -> None:
    for name in TWINS:
        sync, twin = (
            inspect.signature(getattr(RoutingSession, name)),
            inspect.signature(getattr(RoutingSession, f"a{name}")),
        )
        assert twin.parameters == sync.parameters, name
        assert inspect.iscoroutinefunction(getattr(RoutingSession, f"a{name}")), name
    assert inspect.iscoroutinefunction(RoutingSession.__aenter__)


def test_turns_driven_through_the_twins_run_no_statement_on_the_event_loop(log: EpisodeLog, slow: SlowLog) -> None:
    # built before the loop runs: a session's construction is sync (a server builds it at startup)
    other, here = _session(log), _session(log)  # another worker, where a turn paused and is resumed here

    async def one_turn(session: RoutingSession, i: int) -> str:
        t = await session.abegin(user_id=USER, query=f"weather in Lyon? {i}", thread_id=f"t{i}")
        await session.arecord_model_call(t.id, "model", 12.0, input_tokens=30, output_tokens=5)
        await session.asuspend(t.id)  # an interrupt: the copy is written
        # a call that ended after the pause: its step goes to the paused turn's copy
        await session.arecord_tool_call(t.id, "get_weather", {"city": "Lyon"}, result="sunny", latency_ms=3.0)
        going_on = await session.aunpause(t)
        assert going_on is t
        answer = await session.afinish(t.id, "It is sunny in Lyon.")
        receipt = await session.afeedback(answer, correct=True)
        assert receipt.status != "duplicate"
        return answer

    async def work() -> tuple[list[str], str, int]:
        async with here as session:
            paused = await other.abegin(user_id=USER, query="weather in Lyon?", thread_id="elsewhere")
            await other.asuspend(paused.id)
            await other.aabandon(paused.id)  # that worker went away; its copy stays in the log
            answers = list(await asyncio.gather(*(one_turn(session, i) for i in range(TURNS))))
            kept = await session.akept_turn(paused.id)
            assert kept is not None and kept.copy is not None and kept.copy.paused  # read back from the log
            resumed = await session.aresume(paused.id, user_id=USER, query="weather in Lyon?", thread_id="elsewhere")
            assert resumed is kept and await session.aresume(paused.id, user_id=USER, query="-") is kept
            resumed = await session.aunpause(resumed)
            assert resumed is not None
            answers.append(await session.afinish(resumed.id, "Sunny."))
            learned = await session.alearn_pending()
            version = await session.asave_snapshot()
        await other.aclose()
        return answers, version, learned

    (answers, version, learned), worst = slow.measure(work)
    slow.assert_loop_free(worst)
    assert len(set(answers)) == TURNS + 1 and log.count_episodes() == TURNS + 1
    for episode_id in answers[:TURNS]:
        episode = log.get_episode(episode_id)
        assert [s.name for s in episode.steps] == ["model", "get_weather"]
        assert any(f.payload.get("correct") is True for f in log.feedback_for(episode_id))
    assert version and learned >= 0
    assert log.suspended_turns() == []


def test_the_twins_raise_what_their_sync_forms_raise(log: EpisodeLog) -> None:
    async def work() -> None:
        async with _session(log) as session:
            with pytest.raises(InvalidRecordError, match="user_id"):
                await session.abegin(user_id="", query="hi")
            with pytest.raises(InvalidRecordError, match="no turn in flight"):
                await session.afinish("nope", "answer")
            with pytest.raises(InvalidRecordError, match="no turn in flight"):
                await session.arecord_tool_call("nope", "get_weather", {}, result=None)

    asyncio.run(work())


def test_a_cancelled_afinish_has_logged_its_episode_once_when_the_caller_sees_it(
    log: EpisodeLog, slow: SlowLog
) -> None:
    session = _session(log)

    async def work() -> tuple[int, str]:
        t = await session.abegin(user_id=USER, query="I moved to Oslo. Weather?", thread_id="t1")
        finishing = asyncio.create_task(session.afinish(t.id, "Sunny in Oslo."))
        await asyncio.sleep(DELAY_S / 2)  # inside the episode's write: many statements to go
        finishing.cancel()
        await asyncio.sleep(0)
        finishing.cancel()  # a second cancellation is waited out too
        with pytest.raises(asyncio.CancelledError):
            await finishing
        # read at once: the thread is done, its transaction committed (asyncio.to_thread alone
        # would raise here while the thread still wrote, and this read would find nothing)
        logged = await asyncio.to_thread(log.count_episodes)
        with pytest.raises(InvalidRecordError, match="no turn in flight"):  # a retry logs nothing again
            await session.afinish(t.id, "Sunny in Oslo.")
        return logged, t.episode_id

    try:
        (logged, episode_id), worst = slow.measure(work)
        slow.assert_loop_free(worst)
        assert logged == 1 and log.count_episodes() == 1
        assert log.get_episode(episode_id).answer == "Sunny in Oslo."
        assert any("Oslo" in m.text for m in session.memory.recall(USER, "where do I live?"))  # its fact, stored
    finally:
        session.close()


def test_a_begin_cancelled_by_a_timeout_forgets_its_turn(log: EpisodeLog, slow: SlowLog) -> None:
    session = _session(log)

    async def work() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(DELAY_S / 2):
                await session.abegin(user_id=USER, query="weather in Lyon?", thread_id="t1")

    try:
        _, worst = slow.measure(work)
        slow.assert_loop_free(worst)
        assert session.running_turns("t1") == frozenset()  # forgotten once routed
        (kept,) = log.suspended_turns()  # its decision stays, as abandon leaves it
        assert not kept.paused and kept.thread_id == "t1"
    finally:
        session.close()


def test_a_turn_running_here_records_its_steps_without_leaving_the_loop(log: EpisodeLog) -> None:
    async def work() -> list[str]:
        async with _session(log) as session:
            t = await session.abegin(user_id=USER, query="weather in Lyon?")
            recording = session.arecord_tool_call(t.id, "get_weather", {"city": "Lyon"}, result="sunny")
            with pytest.raises(StopIteration):  # done at its first step: it never awaited a thread
                recording.send(None)
            return [s.name for s in session.get_turn(t.id).steps]

    assert asyncio.run(work()) == ["get_weather"]
