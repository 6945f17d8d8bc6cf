"""Conversations as real users write them, through ``create_memabra_agent`` with the offline
stand-in model, on both memory backends: what is stored, what is refreshed or retired, and which
turns are marked corrected."""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from memabra import Budget, ExtractiveChatModel, create_memabra_agent
from memabra._memory import MemoryBackend
from memabra.router import HybridRouter, Similarity


def _agent(memory: MemoryBackend, log):  # type: ignore[no-untyped-def]
    return create_memabra_agent(
        ExtractiveChatModel(),
        memory=memory,
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=300),
    )


def _ask(agent, text: str, thread: str = "t1", user: str = "ann") -> str:  # type: ignore[no-untyped-def]
    out = agent.invoke(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context={"user_id": user}
    )
    return str(out["memabra_episode_id"])


def _corrected(log, episode_id: str) -> dict:  # type: ignore[no-untyped-def]
    out: dict = {}
    for f in log.feedback_for(episode_id):
        if f.source == "memabra.corrections":
            out.update(f.payload)
    return out


def test_a_phone_users_fact_beside_a_question_and_a_curly_complaint(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent = _agent(memory, log)
    _ask(agent, "hey, i\u2019m vegetarian, what should i cook tonight?")
    [diet] = memory.items("ann")
    assert diet.text == "I'm vegetarian"
    first = _ask(agent, "what can I have for lunch?", thread="t2")
    _ask(agent, "ugh I\u2019ve already told you I\u2019m vegetarian!!", thread="t2")
    # the fact is refreshed, not duplicated, and never stored with the complaint
    assert [i.text for i in memory.items("ann")] == ["I'm vegetarian"]
    assert memory.history("ann", diet.id)[-1].action.value == "refreshed"
    assert _corrected(log, first) == {"correction": True, "relevant_ids": [diet.id]}


def test_i_already_did_it_is_no_correction_and_stores_nothing(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent = _agent(memory, log)
    memory.remember("ann", "I'm vegetarian")
    first = _ask(agent, "what should I cook tonight?")
    _ask(agent, "I already ate, thanks")
    assert _corrected(log, first) == {}


def test_a_negation_in_a_turn_retires_the_old_fact_from_the_next_turn_on(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent = _agent(memory, log)
    memory.remember("ann", "I'm vegetarian")
    memory.remember("ann", "My wife is vegan")
    _ask(agent, "I'm not vegetarian anymore, my wife still is though. Any steak recipes?")
    current = sorted(i.text for i in memory.items("ann"))
    assert current == ["I'm not vegetarian anymore, my wife still is though", "My wife is vegan"]
