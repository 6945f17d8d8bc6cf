"""End-to-end: the graph driven by a scripted chat model, every row checked in the log."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from runtime.learning_log import log_final

from factories import readable_final_rewards
from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, InvalidRecordError
from memabra._agent import create_memabra_agent
from memabra._catalog import Skill
from memabra._learner import learn_item, replay
from memabra.router import HybridRouter, LinearRouter, learned_model, load_router
from memabra.storage import EpisodeLog, LearnerStore, upgrade

USER = {"user_id": "ann"}


def weather_call(city: str = "Lyon") -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": city}, "id": "call-1"}])


def make_agent(log: EpisodeLog, tools: list, lexical, replies: list, **kwargs):  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(replies=replies)
    agent = create_memabra_agent(
        model,
        tools=tools,
        skills=[Skill("metric", "answer with metric units", "Always give temperatures in Celsius.")],
        db=log,
        router=kwargs.pop("router", HybridRouter(similarity=lexical)),
        budget=kwargs.pop("budget", Budget(max_tokens=400)),
        **kwargs,
    )
    return agent, model


def ask(agent, text: str, thread: str = "t1", user: dict | None = None):  # type: ignore[no-untyped-def]
    return agent.invoke(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context=user or USER
    )


def test_a_turn_is_routed_run_and_logged_with_everything(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, model = make_agent(log, tools, lexical, [weather_call(), AIMessage("It is sunny and 21C in Lyon, Ann.")])
    agent.session.memory.remember("ann", "My name is Ann and I live in Lyon")
    out = ask(agent, "What is the weather in the city where I live?")
    assert out["messages"][-1].content.startswith("It is sunny")
    ep = agent.log.get_episode(out["memabra_episode_id"])
    sel = ep.selections[0]
    assert {sc.candidate.kind for sc in sel.offered} == {CandidateKind.MEMORY, CandidateKind.SKILL, CandidateKind.TOOL}
    for draw in sel.slots:
        assert sum(draw.probabilities) == pytest.approx(1.0)
    assert sel.propensity > 0
    assert [(s.kind.value, s.name, s.status) for s in ep.steps] == [
        ("model", "ScriptedChatModel", "ok"),
        ("tool", "get_weather", "ok"),
        ("model", "ScriptedChatModel", "ok"),
    ]
    assert ep.steps[1].arguments == {"city": "Lyon"} and ep.steps[1].result == "sunny and 21C in Lyon"
    assert ep.steps[0].input_tokens is not None
    assert ep.reward is not None and ep.reward.components.ht == 1.0
    # the model saw the chosen memory in its system prompt and only the chosen tools
    system, bound = model.calls[0][0][0].content, model.calls[0][1]
    assert "I live in Lyon" in system
    assert set(bound) == {c.metadata["name"] for c in sel.chosen if c.kind is CandidateKind.TOOL}


def test_a_tool_error_raises_e(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(
        log, tools, lexical, [weather_call(city=" "), AIMessage("Sorry, I could not get the weather.")]
    )
    out = ask(agent, "What is the weather today?")
    ep = agent.log.get_episode(out["memabra_episode_id"])
    failed = [s for s in ep.steps if s.status == "error"]
    assert failed and failed[0].error == "ValueError: city is required"
    assert ep.reward is not None and ep.reward.components.e == pytest.approx(0.2)


def test_an_unavailable_tool_call_is_logged_as_an_error(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    bogus = AIMessage("", tool_calls=[{"name": "launch_rocket", "args": {}, "id": "c9"}])
    agent, _ = make_agent(log, tools, lexical, [bogus, AIMessage("done")])
    out = ask(agent, "weather please")
    ep = agent.log.get_episode(out["memabra_episode_id"])
    assert [s.error for s in ep.steps if s.kind.value == "tool"] == [
        "tool 'launch_rocket' is not available in this turn"
    ]


def test_a_correction_in_the_next_turn_raises_c(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(log, tools, lexical, [AIMessage("How about a steak house?"), AIMessage("Noted, sorry!")])
    agent.session.memory.remember("ann", "I am vegetarian and never eat meat")
    first = ask(agent, "Suggest a restaurant for tonight")
    before = agent.log.get_reward(first["memabra_episode_id"])
    assert before is not None and before.components.c == 0.0
    ask(agent, "I already told you, I am vegetarian, no meat!")
    after = agent.log.get_episode(first["memabra_episode_id"])
    assert after.reward is not None and after.reward.components.c == 1.0
    assert after.reward.total < before.total
    implicit = [f for f in after.feedback if f.source == "memabra.corrections"]
    assert implicit and implicit[0].payload["correction"] is True
    assert agent.log.list_episodes().items[-1].corrected


def test_that_s_wrong_costs_the_detector_s_lighter_severity(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(log, tools, lexical, [AIMessage("Sydney."), AIMessage("Sorry: Canberra.")])
    first = ask(agent, "What is the capital of Australia?")
    ask(agent, "No, that's wrong, try again")
    (implicit,) = [
        f for f in agent.log.get_episode(first["memabra_episode_id"]).feedback if f.source == "memabra.corrections"
    ]
    assert implicit.payload["correction"] is True and implicit.payload["correction_severity"] == 0.5
    reward = agent.log.get_reward(first["memabra_episode_id"])
    assert reward is not None and reward.components.c == 0.5  # 1.0 for "I already told you ..."


def test_a_correction_is_charged_to_the_thread_s_last_turn_whichever_worker_served_it(
    migrated_url: str, tools, lexical
) -> None:  # type: ignore[no-untyped-def]
    """Two workers (two agents, each with its own connection to one log) share a thread: the
    correction A reads is about the turn B served last, not about A's own earlier turn."""

    def worker():  # type: ignore[no-untyped-def]
        model = ScriptedChatModel(replies=[AIMessage("How about a steak house?")])
        return create_memabra_agent(model, tools=tools, db=migrated_url, router=HybridRouter(similarity=lexical))

    with worker() as a, worker() as b:
        a.session.memory.remember("ann", "I am vegetarian and never eat meat")
        first = ask(a, "What is the capital of France?", thread="shared")["memabra_episode_id"]
        second = ask(b, "Suggest a restaurant for tonight", thread="shared")["memabra_episode_id"]
        ask(a, "I already told you I'm vegetarian, no meat!", thread="shared")
        charged = {e: a.log.get_reward(e) for e in (first, second)}
        assert charged[second] is not None and charged[second].components.c == 1.0
        assert charged[first] is not None and charged[first].components.c == 0.0
        assert not [f for f in a.log.get_episode(first).feedback if f.source == "memabra.corrections"]


def test_a_trained_router_keeps_serving_and_learning_across_turns_and_restarts(
    migrated_url: str, tools, lexical, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A router trained elsewhere, given to an agent on a new log: every turn is decided by it or by
    the learner continuing it (never a fresh model), a restart resumes that lineage, and a replay
    of the log reproduces the exported model."""
    other_url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    upgrade(other_url)
    trained = LinearRouter(similarity=lexical)
    with EpisodeLog(other_url) as other:
        log_final(other, 20)
        for final in LearnerStore(other.engine).read_final():
            learn_item(trained, final.item, local_credit=False)
    given = trained.policy_version

    def build():  # type: ignore[no-untyped-def]
        router = load_router(trained.snapshot(), similarity=lexical)
        model = ScriptedChatModel(replies=[AIMessage("Noted.")])
        return create_memabra_agent(model, tools=tools, db=migrated_url, router=router, snapshot_every=2)

    for run, turns in enumerate((4, 2)):
        with build() as agent:
            if run == 0:
                agent.session.memory.remember("ann", "I live in Lyon")
            for i in range(turns):
                out = ask(agent, "Where do I live?", thread=f"r{run}-{i}")
                ep = agent.log.get_episode(out["memabra_episode_id"])
                assert ep.selections[0].policy_version.startswith(given), (run, i, ep.selections[0].policy_version)
                agent.feedback(ep.id, correct=True, final=True)
    with EpisodeLog(migrated_url) as log:
        active = LearnerStore(log.engine).active_version("linear")
        assert active is not None and active.startswith(f"{given}+")
        router, n = replay(log, "linear")
        assert n == 6 and learned_model(log.get_snapshot(active)) == learned_model(router.snapshot())


def test_an_injected_but_unused_memory_raises_x(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(log, tools, lexical, [AIMessage("Paris is the capital of France.")])
    agent.session.memory.remember("ann", "On my France trip I visited the Louvre museum with my sister")
    out = ask(agent, "What is the capital city of France?")
    ep = agent.log.get_episode(out["memabra_episode_id"])
    memory_ids = [c.id for c in ep.selections[0].chosen if c.kind is CandidateKind.MEMORY]
    assert memory_ids, "the memory should have been injected"
    assert ep.used_ids is not None and not (set(memory_ids) & ep.used_ids)
    used_agent, _ = make_agent(
        log, tools, lexical, [AIMessage("Paris, where you visited the Louvre museum with your sister.")]
    )
    out2 = ask(used_agent, "What is the capital city of France?", thread="t2")
    ep2 = used_agent.log.get_episode(out2["memabra_episode_id"])
    assert ep.reward is not None and ep2.reward is not None
    assert ep.reward.components.x > ep2.reward.components.x


def test_new_facts_become_memories_once(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(log, tools, lexical, [AIMessage("Nice to meet you")])
    ask(agent, "Hi, my dog is called Rex. I live in Oslo.")
    ask(agent, "my dog is called Rex")
    texts = sorted(m.text for m in agent.session.memory.items("ann"))
    assert texts == ["I live in Oslo", "my dog is called Rex"]
    assert agent.session.memory.items("bob") == []


def test_user_is_required(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(log, tools, lexical, [AIMessage("hi")])
    with pytest.raises(InvalidRecordError, match="user_id"):
        agent.invoke({"messages": [HumanMessage("hello")]})


def test_async_and_streaming_work_like_sync(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(log, tools, lexical, [weather_call(), AIMessage("Sunny in Lyon.")] * 3)
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("weather in Lyon?")]}, context=USER))
    ep = agent.log.get_episode(out["memabra_episode_id"])
    assert [s.kind.value for s in ep.steps] == ["model", "tool", "model"]
    chunks = list(agent.stream({"messages": [HumanMessage("weather in Lyon?")]}, context=USER, stream_mode="updates"))
    assert [next(iter(c)) for c in chunks] == ["route", "agent", "tools", "agent", "finish"]

    async def collect() -> list:  # type: ignore[type-arg]
        return [
            c
            async for c in agent.astream(
                {"messages": [HumanMessage("weather in Lyon?")]}, context=USER, stream_mode="updates"
            )
        ]

    assert [next(iter(c)) for c in asyncio.run(collect())][-1] == "finish"
    assert agent.log.count_episodes() == 3


def test_checkpointer_keeps_the_conversation_and_turn_numbers(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    agent, _ = make_agent(log, tools, lexical, [AIMessage("first"), AIMessage("second")], checkpointer=InMemorySaver())
    ask(agent, "hello there")
    out = ask(agent, "and again")
    assert len(out["messages"]) == 4
    ep = agent.log.get_episode(out["memabra_episode_id"])
    assert ep.turn == 1 and ep.thread_id == "t1"


def test_memories_can_live_in_a_langgraph_store(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryStore()
    agent, model = make_agent(log, tools, lexical, [AIMessage("You live in Lyon.")], store=store)
    ask(agent, "I live in Lyon.")
    assert [it.value["text"] for it in store.search(("memabra", "memories", "ann"))] == ["I live in Lyon"]
    ask(agent, "Where do I live?")
    assert "I live in Lyon" in model.calls[-1][0][0].content


def test_learning_changes_later_decisions(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    """A memory the user always needs but similarity misses gets injected more once learned from."""
    from memabra.router import VWRouter

    router = VWRouter(similarity=lexical, seed=3, epsilon=0.2)
    agent, _ = make_agent(
        log,
        tools,
        lexical,
        [AIMessage("A vegetarian place: Green Garden.")],
        router=router,
        budget=Budget(max_tokens=200, slots={CandidateKind.MEMORY: 1}),
    )
    agent.session.kinds = (CandidateKind.MEMORY,)
    diet = agent.session.memory.remember("ann", "I am vegetarian")
    for i in range(8):
        agent.session.memory.remember("ann", f"Restaurant note {i}: the restaurant downtown had a long queue")

    def p_diet() -> float:
        sel = agent.router.choose(
            __import__("memabra").RoutingContext(
                "suggest a restaurant for dinner", "ann", budget=agent.session.budget, kinds=(CandidateKind.MEMORY,)
            ),
            [m.as_candidate() for m in agent.session.memory.items("ann")],
        )
        return sel.slots[0].probability_of(diet.id)

    before = p_diet()
    for i in range(40):
        out = ask(agent, "suggest a restaurant for dinner", thread=f"x{i}")
        ep = agent.log.get_episode(out["memabra_episode_id"])
        helped = diet.id in ep.selections[0].chosen_ids
        agent.feedback(ep.id, correct=helped, relevant_ids=[diet.id], final=True)
    after = p_diet()
    assert after > before + 0.2, (before, after)


def test_closing_the_agent_saves_what_it_learned_and_a_new_agent_resumes_it(log: EpisodeLog, tools, lexical) -> None:  # type: ignore[no-untyped-def]
    from memabra.router import VWRouter
    from memabra.storage import LearnerStore

    def build():  # type: ignore[no-untyped-def]
        agent, _ = make_agent(log, tools, lexical, [AIMessage("Noted.")] * 10, router=VWRouter(similarity=lexical))
        return agent

    with build() as agent:
        agent.session.memory.remember("ann", "I live in Lyon")
        for i in range(3):
            out = ask(agent, "Where do I live?", thread=f"c{i}")
            agent.feedback(out["memabra_episode_id"], correct=True, final=True)
        # on PostgreSQL a reward is readable once every older transaction on the server ended
        # (another test's may be open): learn what a feedback's own step could not read yet
        readable_final_rewards(LearnerStore(log.engine), at_least=3)
        agent.session.learn_pending()
        assert LearnerStore(log.engine).checkpoint("vw") is None  # fewer than snapshot_every: nothing saved yet
    state = LearnerStore(log.engine).checkpoint("vw")
    assert state is not None and state.learned == 3
    resumed = build()
    assert resumed.router.policy_version == state.snapshot_version
    resumed.close()
