"""Embeddings computed once and kept for every process; recall that cuts large pools."""

from __future__ import annotations

import numpy as np
from langchain_core.messages import AIMessage, HumanMessage
from memory_helpers import HashingEncoder

from fakes import ScriptedChatModel
from memabra import Budget, SQLMemory, create_memabra_agent
from memabra._recall import RECALL_ALL, RECALL_LIMIT, rank
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


def _straightforward_scores(texts: list[str], query: str, encoder: CachingEncoder) -> np.ndarray:
    """The hybrid prior written out document by document: z(BM25) + z(cosine), nothing cached."""
    import math

    from memabra._text import content_words

    k1, b = 1.5, 0.75
    docs = [content_words(t) for t in texts]
    lengths = [max(len(d), 1) for d in docs]
    mean_length = max(sum(lengths) / len(lengths), 1.0)
    lexical = np.zeros(len(texts))
    for term in content_words(query):
        df = sum(term in d for d in docs)
        if df == 0:
            continue
        idf = math.log(1.0 + (len(texts) - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            if term in d:
                lexical[i] += idf * (k1 + 1.0) / (1.0 + k1 * (1.0 - b + b * lengths[i] / mean_length))
    q = encoder.encode([query])[0].astype(np.float64)
    semantic = np.array([float(encoder.encode([t])[0].astype(np.float64) @ q) for t in texts])

    def z(x: np.ndarray) -> np.ndarray:
        return (x - x.mean()) / x.std() if x.std() > 1e-12 else np.zeros_like(x)

    return z(lexical) + z(semantic)


def test_the_cached_index_recalls_what_the_straightforward_ranking_does(log: EpisodeLog) -> None:
    encoder = CachingEncoder(HashingEncoder(dim=96))
    memory = SQLMemory(log, encoder=encoder)
    things = "kayak violin garden teapot lantern ferry quilt banjo canoe bicycle telescope hammock".split()
    places = "Lyon Oslo Porto Kyoto Quito Tartu Bergen Cusco Dakar Hobart Lima Riga".split()
    verbs = "repaired painted borrowed sold visited cleaned".split()
    memory.remember_many("ann", [f"I {v} the {t} in {p}" for t in things for p in places for v in verbs])
    queries = ["where did I repair the kayak?", "the violin in Oslo", "what did I sell in Lima", "teapot"]
    for round_ in range(2):
        items = memory.items("ann")
        texts = [i.text for i in items]
        for query in queries:
            recalled = memory.recall("ann", query)  # the per-process index, built once per version
            assert [i.id for i in recalled] == [i.id for i, _ in rank(items, query, encoder)[:RECALL_LIMIT]]
            exact = dict(zip((i.id for i in items), _straightforward_scores(texts, query, encoder), strict=True))
            kept = {i.id for i in recalled}
            worst_kept = min(exact[i] for i in kept)
            best_left = max(s for i, s in exact.items() if i not in kept)
            assert worst_kept >= best_left - 1e-9, query  # the same top RECALL_LIMIT (ties aside)
        if round_ == 0:  # a write moves the version: the next recall sees it at once
            memory.remember("ann", "I repaired the kayak in Hobart with epoxy")
            memory.forget("ann", items[0].id)
