"""A LangGraph store as a first-class backend: LangMem's item shapes, namespace templates, the
store's own vector index for recall."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.memory import InMemoryStore
from memory_helpers import hashing_embed

from fakes import ScriptedChatModel
from memabra import Budget, ConfigError, InvalidRecordError, StoreMemory, create_memabra_agent
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog


def test_langmem_shapes_are_read() -> None:
    store = InMemoryStore()
    ns = ("memories", "ann")
    store.put(ns, "a", {"content": "I live in Lyon"})  # LangMem's manage_memory tool
    store.put(ns, "b", {"kind": "Memory", "content": {"content": "My dog is called Rex"}})  # memory manager
    store.put(ns, "c", {"kind": "UserProfile", "content": {"name": "Ann", "city": "Lyon"}})  # a profile schema
    store.put(ns, "d", {"text": "I am vegetarian"})  # memabra's older shape
    memory = StoreMemory(store, namespace=("memories", "{user_id}"))
    assert {i.id: i.text for i in memory.items("ann")} == {
        "a": "I live in Lyon",
        "b": "My dog is called Rex",
        "c": "name: Ann; city: Lyon",
        "d": "I am vegetarian",
    }


def test_an_unreadable_shape_is_a_clear_error_never_an_empty_bullet(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryStore()
    store.put(("memories", "ann"), "weird", {"payload": [1, 2, 3]})
    memory = StoreMemory(store, namespace=("memories", "{user_id}"))
    with pytest.raises(InvalidRecordError, match=r"memories/ann/weird.*keys are: payload"):
        memory.items("ann")
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("hi")]),
        memory=memory,
        db=f"sqlite:///{tmp_path / 'm.db'}",
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=300),
    )
    with pytest.raises(InvalidRecordError, match="cannot read the store item"):
        agent.invoke(
            {"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "t"}}, context={"user_id": "ann"}
        )


def test_what_memabra_writes_langmem_reads_back() -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=("memories", "{user_id}"))
    item = memory.remember("ann", "I live in Lyon")
    value = store.get(("memories", "ann"), item.id).value  # type: ignore[union-attr]
    assert value["content"] == {"content": "I live in Lyon"} and value["kind"] == "Memory"


def test_the_namespace_is_a_template() -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=("apps", "chat", "{user_id}", "facts"))
    memory.remember("ann", "I live in Lyon")
    assert [it.key for it in store.search(("apps", "chat", "ann", "facts"))]
    assert memory.items("bob") == []
    with pytest.raises(ConfigError, match="must contain '{user_id}'"):
        StoreMemory(store, namespace=("memories", "all"))


def test_a_nested_namespace_of_another_user_is_not_read() -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=("m", "{user_id}"))
    store.put(("m", "ann", "private"), "x", {"content": "not a memory of ann's pool"})
    memory.remember("ann", "I live in Lyon")
    assert [i.text for i in memory.items("ann")] == ["I live in Lyon"]


def test_with_an_index_candidates_come_from_the_store_search() -> None:
    store = InMemoryStore(index={"dims": 64, "embed": hashing_embed, "fields": ["text"]})
    memory = StoreMemory(store, namespace=("memories", "{user_id}"))
    for i in range(30):
        memory.remember("ann", f"Note number {i} about the garden shed paint")
    memory.remember("ann", "My dog is called Rex")
    assert memory.has_index
    recalled = memory.recall("ann", "dog called", limit=3)
    assert len(recalled) == 3 and recalled[0].text == "My dog is called Rex"


def test_agent_builds_on_a_store_passed_as_memory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryStore()
    store.put(("memabra", "memories", "ann"), "k1", {"content": "I live in Lyon"})
    model = ScriptedChatModel(replies=[AIMessage("Lyon it is")])
    agent = create_memabra_agent(
        model,
        memory=store,
        db=f"sqlite:///{tmp_path / 'm.db'}",
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=300),
    )
    agent.invoke(
        {"messages": [HumanMessage("where do I live?")]},
        {"configurable": {"thread_id": "t"}},
        context={"user_id": "ann"},
    )
    system = model.calls[0][0][0].content
    assert "- I live in Lyon" in system and "\n- \n" not in system + "\n"


def test_an_agent_log_is_fine_with_store_memory(memory_log) -> None:  # type: ignore[no-untyped-def]
    memory, log = memory_log
    assert isinstance(log, EpisodeLog)
    memory.remember("ann", "I live in Lyon")
    assert [c.text for c in memory.candidates("ann")] == ["I live in Lyon"]
