"""Embeddings computed once and kept for every process; recall that cuts large pools."""

from __future__ import annotations

import numpy as np
from langchain_core.messages import AIMessage, HumanMessage
from memory_helpers import HashingEncoder

from fakes import ScriptedChatModel
from memabra import Budget, SQLMemory, create_memabra_agent
from memabra._recall import RECALL_ALL, RECALL_LIMIT
from memabra.router import CachingEncoder, HybridRouter, Similarity
from memabra.storage import EmbeddingTable, EpisodeLog


def test_the_embedding_table_round_trips_vectors(log: EpisodeLog) -> None:
    table = EmbeddingTable(log.engine)
    v = np.arange(4, dtype=np.float32) / 4
    table.save("enc", {"a text": v})
    table.save("enc", {"a text": v})  # saving again is a no-op, not a duplicate-key error
    assert np.array_equal(table.load("enc", ["a text", "another"])["a text"], v)
    assert table.load("other-encoder", ["a text"]) == {}


def test_a_second_process_reuses_the_stored_vectors(log: EpisodeLog) -> None:
    texts = [f"tool number {i} does thing {i}" for i in range(700)]
    first = HashingEncoder()
    CachingEncoder(first, backing=EmbeddingTable(log.engine)).warm(texts)
    assert first.texts == 700
    fresh = HashingEncoder()  # a new process: empty cache, same log
    again = CachingEncoder(fresh, backing=EmbeddingTable(log.engine))
    assert again.warm(texts) == 0 and fresh.texts == 0
    assert np.allclose(again.encode(texts[:3]), first.encode(texts[:3]))


def _agent(log: EpisodeLog, encoder: HashingEncoder):  # type: ignore[no-untyped-def]
    similarity = Similarity(encoder=CachingEncoder(encoder))
    return create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("ok")] * 4),
        db=log,
        router=HybridRouter(similarity=similarity),
        budget=Budget(max_tokens=300),
    )


def test_the_runtime_embeds_each_candidate_once_ever(log: EpisodeLog) -> None:
    first = HashingEncoder()
    agent = _agent(log, first)
    places = "Peru Chile Spain Japan Kenya Laos Mali Nepal Oman Fiji Cuba Iran Iraq Chad Togo Benin Malta Qatar Yemen Niger".split()
    for place in places:
        agent.session.memory.remember("ann", f"I collect stamps from {place}")
    agent.invoke(
        {"messages": [HumanMessage("stamps?")]}, {"configurable": {"thread_id": "a"}}, context={"user_id": "ann"}
    )
    embedded_first = first.texts
    fresh = HashingEncoder()
    second = _agent(log, fresh)  # another process on the same log
    second.invoke(
        {"messages": [HumanMessage("stamps?")]}, {"configurable": {"thread_id": "b"}}, context={"user_id": "ann"}
    )
    assert embedded_first >= 20 and fresh.texts == 1  # only the query


def test_large_pools_are_cut_by_the_hybrid_prior_and_see_new_memories_at_once(log: EpisodeLog) -> None:
    memory = SQLMemory(log, encoder=CachingEncoder(HashingEncoder()))
    fruits = "apples pears plums figs dates limes kiwis grapes melons cherries peaches lemons mangoes oranges".split()
    shops = "market grocer bakery kiosk deli".split()
    notes = [f"Shopping note: buy {a} and {b} at the {c}" for a in fruits for b in fruits if a < b for c in shops]
    assert len(notes) > RECALL_ALL * 3
    memory.remember_many("ann", notes[: RECALL_ALL * 3])
    memory.remember("ann", "My dog is called Rex")
    pool = memory.recall("ann", "what is my dog called")
    assert len(pool) == RECALL_LIMIT and pool[0].text == "My dog is called Rex"
    cat = memory.remember("ann", "My cat is called Tom")
    assert cat.id in {i.id for i in memory.recall("ann", "my cat called")}
    memory.forget("ann", cat.id)
    assert cat.id not in {i.id for i in memory.recall("ann", "my cat called")}


def test_small_pools_go_to_the_router_whole(log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    memory.remember_many(
        "ann",
        [
            f"I grow {f} in my garden"
            for f in "apples pears plums figs dates limes kiwis grapes melons cherries".split()
        ],
    )
    assert len(memory.recall("ann", "anything")) == 10
