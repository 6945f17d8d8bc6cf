"""``SessionSettings.token_counter`` on every way a turn is routed (the async twins, the agent's
``ainvoke``, a turn resumed in a process that did not route it), under concurrent turns, and what
its cache keeps of users' memories."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import tracemalloc
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from fakes import ScriptedChatModel
from memabra._agent import create_memabra_agent
from memabra._catalog import Skill
from memabra._context import memory_line, skill_section
from memabra._records import CandidateKind, Selection
from memabra._session import RoutingSession
from memabra._token_count import TokenCounts
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

PIRATE = Skill("pirate", "talk like a pirate", "Say arr at every turn.")


def _session(log: EpisodeLog, tools: list[Any], **settings: Any) -> RoutingSession:
    return RoutingSession.with_tools(
        tools=tools, skills=[PIRATE], router=HybridRouter(similarity=Similarity(encoder=None)), log=log, **settings
    )


def _offered_tokens(log: EpisodeLog, episode_id: str) -> dict[str, int]:
    (selection,) = log.get_episode(episode_id).selections
    return {sc.candidate.id: sc.candidate.tokens for sc in selection.offered}


class NotThreadSafe:
    """A tokenizer that may not be shared by two threads at once, as a Hugging Face fast tokenizer
    (``RuntimeError: Already borrowed``); counts characters."""

    def __init__(self, pause_s: float = 0.02) -> None:
        self.pause_s = pause_s
        self._busy = threading.Lock()
        self.calls = 0

    def __call__(self, text: str) -> int:
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("Already borrowed")
        try:
            self.calls += 1
            time.sleep(self.pause_s)
            return len(text)
        finally:
            self._busy.release()


def _memory_tokens(selection: Selection | None) -> dict[str, int]:
    assert selection is not None
    return {
        sc.candidate.text: sc.candidate.tokens for sc in selection.offered if sc.candidate.kind is CandidateKind.MEMORY
    }


def test_the_counter_is_called_by_one_thread_at_a_time() -> None:
    counter = NotThreadSafe(pause_s=0.01)
    counts = TokenCounts(counter)
    start = threading.Barrier(8)
    failed: list[BaseException] = []

    def count(i: int) -> None:
        start.wait()
        try:
            counts.count(f"- memory number {i}", f"memory:{i}")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            failed.append(exc)

    threads = [threading.Thread(target=count, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    assert counter.calls == 8


def test_concurrent_async_turns_count_with_a_tokenizer_that_is_not_thread_safe(
    log: EpisodeLog, tools: list[Any]
) -> None:
    """``abegin`` routes on worker threads: turns of several users at once each count their
    memories, and none fails for another's tokenizer call."""
    counter = NotThreadSafe()
    users = [f"user{i}" for i in range(6)]
    with _session(log, tools, learn=False, token_counter=counter) as session:
        for user in users:
            session.memory.remember(user, f"I live in city number {user}")

        async def turns() -> list[Any]:
            return await asyncio.gather(
                *(session.abegin(user_id=u, query="where do I live", thread_id=u) for u in users),
                return_exceptions=True,
            )

        begun = asyncio.run(turns())
        failed = [t for t in begun if isinstance(t, BaseException)]
        assert failed == []
        for user, t in zip(users, begun, strict=True):
            text = f"I live in city number {user}"
            assert _memory_tokens(t.selection) == {text: len(memory_line(text))}
            session.abandon(t.id)


def test_the_cache_keeps_no_memory_text() -> None:
    """Keyed by a digest: long memories do not fill the process's memory (4,096 of them would be
    held), and a user's text erased from the log is not kept here."""
    counts = TokenCounts(len)
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for i in range(50):
            text = f"- {i} " + "a long memory " * 15_000  # about 200 kB each
            assert counts.count(text, f"memory:{i}") == len(text)
            del text
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held - before < 1_000_000  # the texts alone are 10 MB


def test_the_same_text_is_counted_once_and_others_are_not_mixed_up() -> None:
    counts = TokenCounts(len)
    texts = ["- I live in Lyon", "- I live in Lyon ", "- i live in lyon", "- \udc80 lone surrogate"]
    assert [counts.count(t, "memory:x") for t in texts * 2] == [len(t) for t in texts * 2]


def test_a_turn_routed_afresh_on_resume_counts_its_memories(log: EpisodeLog, tools: list[Any]) -> None:
    """A run resumed in a process that never routed its turn (the log keeps no copy) is routed
    again there: its memories are counted as a new turn's are."""
    with _session(log, tools, learn=False, token_counter=len) as session:
        session.memory.remember("ann", "I live in Lyon")
        t = session.resume("turn-from-a-dead-process", user_id="ann", query="where do I live", thread_id="t1")
        assert _memory_tokens(t.selection) == {"I live in Lyon": len(memory_line("I live in Lyon"))}
        session.abandon(t.id)


def test_the_agents_ainvoke_counts_with_the_counter(log: EpisodeLog, tools: list[Any]) -> None:
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("ok")]),
        tools=tools[:1],
        skills=[PIRATE],
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        learn=False,
        token_counter=len,
    )
    try:
        memory = agent.session.memory.remember("ann", "I live in Lyon")
        out = asyncio.run(
            agent.ainvoke(
                {"messages": [HumanMessage("weather where I live")]},
                {"configurable": {"thread_id": "t1"}},
                context={"user_id": "ann"},
            )
        )
    finally:
        agent.close()
    logged = _offered_tokens(log, str(out["memabra_episode_id"]))
    assert logged["skill:pirate"] == len(skill_section(PIRATE))
    assert logged[memory.id] == len(memory_line("I live in Lyon"))


def test_a_process_without_a_counter_registering_later_changes_no_counted_decision(
    log: EpisodeLog, tools: list[Any]
) -> None:
    """Two processes on one log, one counting and one not: the registry's rows carry the counts of
    the one that registered last, but each routes with its own counts of its skills and tools."""
    with _session(log, tools, learn=False, token_counter=len) as counted, _session(log, tools, learn=False) as plain:
        rows = {i.id: i.tokens for i in log.items("ann") if i.kind is not CandidateKind.MEMORY}
        assert rows["skill:pirate"] != len(skill_section(PIRATE))  # the plain process's estimate
        t = counted.begin(user_id="ann", query="talk like a pirate", thread_id="t1")
        episode_id = counted.finish(t.id, "arr")
        assert _offered_tokens(log, episode_id)["skill:pirate"] == len(skill_section(PIRATE))
        t = plain.begin(user_id="ann", query="talk like a pirate", thread_id="t2")
        episode_id = plain.finish(t.id, "arr")
        assert _offered_tokens(log, episode_id)["skill:pirate"] == rows["skill:pirate"]
