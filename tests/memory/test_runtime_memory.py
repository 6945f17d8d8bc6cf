"""Memory management seen from the runtime: forgotten memories leave the candidate sets and the
log keeps their ids, not their text; corrections refresh the fact; the quickstart runs as written."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from fakes import ScriptedChatModel
from memabra import Budget, MemabraNodeState, StoreMemory, create_memabra_agent
from memabra._memory import MemoryBackend
from memabra.router import HybridRouter, Similarity


def _agent(memory: MemoryBackend, log, replies):  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=replies)
    agent = create_memabra_agent(
        model,
        memory=memory,
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=300),
    )
    return agent, model


def _ask(agent, text: str, thread: str = "t1", user: str = "ann"):  # type: ignore[no-untyped-def]
    return agent.invoke(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context={"user_id": user}
    )


def test_forgotten_memories_leave_candidates_and_the_log_keeps_only_ids(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, model = _agent(memory, log, [AIMessage("You have a dog called Rex."), AIMessage("I don't know.")])
    dog = memory.remember("ann", "My dog is called Rex")
    first = _ask(agent, "what is my dog called?")
    memory.forget("ann", dog.id)
    second = _ask(agent, "what is my dog called?", thread="t2")
    offered = [sc.candidate for sc in log.get_episode(first["memabra_episode_id"]).selections[0].offered]
    [kept] = [c for c in offered if c.id == dog.id]
    assert kept.text == "" and "Rex" not in str(dict(kept.metadata))
    later = log.get_episode(second["memabra_episode_id"]).selections
    assert all(dog.id not in {sc.candidate.id for sc in s.offered} for s in later)
    assert "Rex" not in str(model.calls[-1][0])


def test_a_correction_refreshes_the_fact_and_never_stores_the_complaint(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, _ = _agent(memory, log, [AIMessage("How about a steak?"), AIMessage("Sorry, a vegetable curry then.")])
    diet = memory.remember("ann", "I'm vegetarian")
    _ask(agent, "what should I cook tonight?")
    out = _ask(agent, "I already told you I'm vegetarian")
    assert [i.text for i in memory.items("ann")] == ["I'm vegetarian"]
    change = memory.history("ann", diet.id)[-1]
    assert change.action.value == "refreshed" and change.episode_id == out["memabra_episode_id"]


def test_a_task_for_the_assistant_is_not_stored_as_a_memory(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, _ = _agent(memory, log, [AIMessage("Drafted."), AIMessage("Noted."), AIMessage("Planned.")])
    _ask(agent, "Draft a message telling my team I am away")
    _ask(agent, "Please remember that I'm allergic to nuts", thread="t2")
    _ask(agent, "Plan a trip for me, I hate flying", thread="t3")
    # the task itself is no fact; an asked-for memory and a statement beside a task are
    assert sorted(i.text for i in memory.items("ann")) == ["I hate flying", "I'm allergic to nuts"]


def test_moving_retires_the_old_city_from_the_next_turn_on(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, model = _agent(memory, log, [AIMessage("Noted."), AIMessage("Hobart weather")])
    memory.remember("ann", "I live in Lyon")
    _ask(agent, "I moved to Hobart.")
    _ask(agent, "what is the weather where I live?", thread="t2")
    system = model.calls[-1][0][0].content
    assert "Hobart" in system and "Lyon" not in system


def test_a_sentence_of_two_facts_is_two_memories_and_a_move_keeps_the_dogs_name(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, model = _agent(memory, log, [AIMessage("Noted."), AIMessage("Noted."), AIMessage("Rex.")])
    _ask(agent, "I live in Lyon and my dog is called Rex.")
    assert sorted(i.text for i in memory.items("ann")) == ["I live in Lyon", "My dog is called Rex"]
    _ask(agent, "I moved to Hobart", thread="t2")
    assert sorted(i.text for i in memory.items("ann")) == ["I moved to Hobart", "My dog is called Rex"]
    _ask(agent, "what is my dog called?", thread="t3")
    system = model.calls[-1][0][0].content
    assert "Rex" in system and "Lyon" not in system


def test_a_new_name_keeps_the_allergy_said_with_the_old_one(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, _ = _agent(memory, log, [AIMessage("Noted."), AIMessage("Noted.")])
    _ask(agent, "My name is Ann and I'm allergic to nuts.")
    _ask(agent, "My name is Annabel", thread="t2")
    assert sorted(i.text for i in memory.items("ann")) == ["I'm allergic to nuts", "My name is Annabel"]


def test_the_readme_embedding_example_runs_as_written_on_a_new_sqlite_file(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    model = ScriptedChatModel(replies=[AIMessage("Take an umbrella.")])
    agent = create_memabra_agent(
        model, db="sqlite:///memabra.db", router=HybridRouter(similarity=Similarity(encoder=None))
    )
    out = agent.invoke(
        {"messages": [("user", "Do I need an umbrella tomorrow?")]},
        {"configurable": {"thread_id": "t-42"}},
        context={"user_id": "ann"},
    )
    agent.feedback(out["memabra_episode_id"], correct=False, correction="I moved to Oslo")
    assert (tmp_path / "memabra.db").exists()


def test_user_id_in_configurable_is_accepted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=[AIMessage("Hello Ann.")])
    agent = create_memabra_agent(
        model, db=f"sqlite:///{tmp_path / 'm.db'}", router=HybridRouter(similarity=Similarity(encoder=None))
    )
    agent.session.memory.remember("ann", "My name is Ann")
    out = agent.invoke({"messages": [HumanMessage("greet me")]}, {"configurable": {"thread_id": "t", "user_id": "ann"}})
    assert agent.log.get_episode(out["memabra_episode_id"]).user_id == "ann"


def test_public_exports() -> None:
    assert MemabraNodeState.__annotations__.keys() >= {"messages", "memabra_turn", "memabra_episode_id"}
    assert StoreMemory.__module__ == "memabra._store_memory"


def test_other_databases_name_the_upgrade_command(pg_or_skip) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from memabra import SchemaError

    with pytest.raises(SchemaError, match="memabra db upgrade"):
        create_memabra_agent(
            ScriptedChatModel(replies=[]), db=pg_or_skip, router=HybridRouter(similarity=Similarity(encoder=None))
        )


def test_as_i_said_after_a_turn_that_succeeded_does_not_mark_it_corrected(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, _ = _agent(
        memory, log, [AIMessage("The weather is fine."), AIMessage("Noted."), AIMessage("x"), AIMessage("y")]
    )
    memory.remember("ann", "I'm vegetarian")
    first = _ask(agent, "what is the weather like?")
    agent.feedback(first["memabra_episode_id"], success=1.0)
    _ask(agent, "I'm vegetarian, as I said.")
    assert not any(f.source == "memabra.corrections" for f in log.get_episode(first["memabra_episode_id"]).feedback)
    third = _ask(agent, "what should I cook tonight?", thread="t9", user="bob")
    _ask(agent, "I'm vegetarian, as I said.", thread="t9", user="bob")  # the turn before had no such memory
    assert any(f.source == "memabra.corrections" for f in log.get_episode(third["memabra_episode_id"]).feedback)


def test_list_shows_when_a_memory_was_last_used(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    agent, _ = _agent(memory, log, [AIMessage("Rex, of course.")])
    dog = memory.remember("ann", "My dog is called Rex")
    assert memory.get("ann", dog.id).last_used_at is None
    out = _ask(agent, "what is my dog called?")
    assert dog.id in log.get_episode(out["memabra_episode_id"]).selections[0].chosen_ids
    assert memory.get("ann", dog.id).last_used_at is not None
