"""StoreMemory under the conditions of a production LangGraph store: user ids a namespace label
cannot hold, concurrent writers in one process, a process dying between two store writes, items
deleted behind memabra's back, and erasure."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from memory_helpers import hashing_embed

from memabra import InvalidRecordError, StoreMemory, erase_user
from memabra._memory import MemoryBackend
from memabra._memory_records import MemoryAction, MemoryStatus
from memabra._memory_restore import restore_memory
from memabra.storage import EpisodeLog, upgrade

NS = ("memories", "{user_id}")


class _SlowStore(InMemoryStore):
    """Widens the read-then-write window so that two writers interleave."""

    def search(self, *args: Any, **kwargs: Any) -> Any:
        found = super().search(*args, **kwargs)
        time.sleep(0.02)
        return found


class _DyingStore(InMemoryStore):
    """Dies (raises) on a write under the namespace ``root`` while ``dying`` is set, after
    ``survive`` more of them."""

    dying = False
    survive = 0
    root = "memabra_history"

    def put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        if self.dying and namespace[0] == self.root:
            if self.survive <= 0:
                raise RuntimeError("the process died")
            self.survive -= 1
        super().put(namespace, key, value, *args, **kwargs)


@pytest.mark.parametrize("user_id", ["ann@example.com", "a.b.c", "x%y.z", "ünï.côde", "a/b"])
def test_user_ids_a_namespace_label_cannot_hold_are_stored_and_kept_apart(user_id: str) -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=NS)
    memory.remember(user_id, "I live in Lyon")
    memory.remember("ann", "My dog is called Rex")
    assert [i.text for i in memory.items(user_id)] == ["I live in Lyon"]
    assert [i.text for i in memory.items("ann")] == ["My dog is called Rex"]
    assert memory.forget_all(user_id) == 1 and memory.items(user_id) == []
    assert [i.text for i in memory.items("ann")] == ["My dog is called Rex"]


def test_plain_user_ids_keep_the_namespace_langmem_writes() -> None:
    store = InMemoryStore()
    store.put(("memories", "ann-42_ü"), "k", {"content": "I live in Lyon"})
    assert [i.text for i in StoreMemory(store, namespace=NS).items("ann-42_ü")] == ["I live in Lyon"]


def test_a_user_id_that_would_read_as_an_escaped_one_is_refused_clearly() -> None:
    memory = StoreMemory(InMemoryStore(), namespace=NS)
    memory.remember("a.b", "I live in Lyon")
    with pytest.raises(InvalidRecordError, match=r"user id 'a%2Eb'.*'%2E'"):
        memory.items("a%2Eb")


def test_two_threads_stating_new_values_leave_one_current() -> None:
    memory = StoreMemory(_SlowStore(), namespace=NS)
    threads = [threading.Thread(target=memory.remember, args=("ann", t)) for t in ("I live in Lyon", "I live in Paris")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(memory.items("ann")) == 1
    assert len(memory.list("ann")) == 2  # the other one retired, with its history


def test_two_threads_stating_the_same_fact_store_it_once() -> None:
    memory = StoreMemory(_SlowStore(), namespace=NS)
    threads = [threading.Thread(target=memory.remember, args=("ann", "I live in Lyon")) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [i.text for i in memory.items("ann")] == ["I live in Lyon"]


def test_a_restore_and_a_new_fact_at_once_leave_one_current() -> None:
    # the restore reads what is current, then writes: a new fact landing in between would leave
    # the restored Lyon beside it
    memory = StoreMemory(_SlowStore(), namespace=NS)
    lyon = memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "I live in Paris")
    threads = [
        threading.Thread(target=restore_memory, args=(memory, "ann", lyon.id), kwargs={"replace": True}),
        threading.Thread(target=memory.remember, args=("ann", "I live in Oslo")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(memory.items("ann")) == 1


def test_a_process_dying_after_the_item_write_leaves_its_history_readable() -> None:
    store = _DyingStore()
    memory = StoreMemory(store, namespace=NS)
    lyon = memory.remember("ann", "I live in Lyon")
    store.dying = True
    with pytest.raises(RuntimeError, match="died"):
        memory.remember("ann", "My dog is called Rex")
    with pytest.raises(RuntimeError, match="died"):
        memory.update("ann", lyon.id, "I live in Lyon, France")
    store.dying = False
    rex = next(r for r in memory.list("ann") if r.text == "My dog is called Rex")
    assert [c.action for c in memory.history("ann", rex.id)] == [MemoryAction.CREATED]
    lyon_history = memory.history("ann", lyon.id)
    assert [c.action for c in lyon_history] == [MemoryAction.CREATED, MemoryAction.UPDATED]
    assert lyon_history[-1].new_text == memory.get("ann", lyon.id).text == "I live in Lyon, France"
    # the next write repairs the history in the store itself, and nothing is listed twice
    memory.update("ann", lyon.id, "I live in Lyon again")
    history = memory.history("ann", lyon.id)
    assert [c.action for c in history] == [MemoryAction.CREATED, MemoryAction.UPDATED, MemoryAction.UPDATED]
    kept = store.search(("memabra_history", "memories", "ann"), filter={"memory_id": lyon.id}, limit=100)
    assert len(kept) == 3


def test_a_retirement_cut_short_still_shows_its_history() -> None:
    store = _DyingStore()
    memory = StoreMemory(store, namespace=NS)
    lyon = memory.remember("ann", "I live in Lyon")
    store.dying, store.survive = True, 1  # the new memory and its history are written, then it dies
    with pytest.raises(RuntimeError, match="died"):
        memory.remember("ann", "I live in Paris")
    store.dying = False
    paris = next(r for r in memory.list("ann") if r.text == "I live in Paris")
    assert memory.get("ann", lyon.id).status is MemoryStatus.RETIRED
    assert [c.action for c in memory.history("ann", lyon.id)] == [MemoryAction.CREATED, MemoryAction.RETIRED]
    assert [c.action for c in memory.history("ann", paris.id)] == [MemoryAction.CREATED]


def test_a_process_dying_between_a_new_fact_and_its_retirement_never_leaves_both_current() -> None:
    store = _DyingStore()
    memory = StoreMemory(store, namespace=NS)
    lyon = memory.remember("ann", "I live in Lyon")
    store.dying, store.survive, store.root = True, 1, "memories"  # Paris is written, Lyon's retirement dies
    with pytest.raises(RuntimeError, match="died"):
        memory.remember("ann", "I live in Paris")
    store.dying = False
    assert [i.text for i in memory.items("ann")] == ["I live in Paris"]
    record = memory.get("ann", lyon.id)
    assert record.status is MemoryStatus.RETIRED and record.superseded_by is not None
    assert [c.action for c in memory.history("ann", lyon.id)] == [MemoryAction.CREATED, MemoryAction.RETIRED]
    # once finished, a restored memory stays restored: the old retirement is not done again
    memory.put(memory._item("ann", lyon.id, include_retired=True))
    assert {i.text for i in memory.items("ann")} == {"I live in Paris", "I live in Lyon"}
    assert len(memory.history("ann", lyon.id)) == 3


def test_changes_at_the_same_instant_keep_their_order() -> None:
    memory = StoreMemory(InMemoryStore(), namespace=NS)
    now = memory.clock()
    item = memory.remember("ann", "I live in Lyon", at=now)
    memory.remember("ann", "I live in Lyon!", at=now)  # a restatement: refreshed
    for text in ("I live in Lyon, France", "I live in Lyon, Rhône", "I live in Lyon, FR"):
        memory.update("ann", item.id, text)
    actions = [c.action for c in memory.history("ann", item.id)]
    assert actions[:2] == [MemoryAction.CREATED, MemoryAction.REFRESHED]
    assert [c.new_text for c in memory.history("ann", item.id)][-1] == "I live in Lyon, FR"


def test_forget_all_erases_the_history_of_memories_deleted_behind_memabras_back() -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=NS)
    item = memory.remember("ann", "My secret is 1234")
    memory.remember("bob", "I live in Lyon")
    store.delete(("memories", "ann"), item.id)  # as LangMem's manage_memory(action="delete") does
    memory.forget_all("ann")
    left = store.search(("memabra_history", "memories", "ann"), limit=100)
    assert left == []
    assert len(store.search(("memabra_history", "memories", "bob"), limit=100)) == 1


class _CountingStore(InMemoryStore):
    read = 0

    def search(self, *args: Any, **kwargs: Any) -> Any:
        found = super().search(*args, **kwargs)
        self.read += len(found)
        return found


def test_get_and_history_do_not_read_every_memory() -> None:
    store = _CountingStore()
    memory = StoreMemory(store, namespace=NS)
    memory.remember_many("ann", [f"My note number {i} is about topic {i * 7}" for i in range(300)])
    target = memory.list("ann")[10]
    store.read = 0
    assert memory.get("ann", target.id).text == target.text
    assert [c.action for c in memory.history("ann", target.id)] == [MemoryAction.CREATED]
    assert store.read <= 5


def test_a_history_entry_of_another_shape_is_named() -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=NS)
    item = memory.remember("ann", "I live in Lyon")
    store.put(("memabra_history", "memories", "ann"), "bad", {"memory_id": item.id, "action": "moved"})
    with pytest.raises(InvalidRecordError, match=r"history entry memabra_history/memories/ann/bad.*it has: action"):
        memory.history("ann", item.id)


def test_indexed_recall_is_not_crowded_out_by_retired_memories() -> None:
    store = InMemoryStore(index={"dims": 64, "embed": hashing_embed, "fields": ["text"]})
    memory = StoreMemory(store, namespace=NS)
    for city in ("Lyon", "Paris", "Rome", "Oslo", "Bern", "Nice", "Kyiv", "Riga", "Lima", "Cork", "Bonn", "Graz"):
        memory.remember("ann", f"I live in {city}")  # each retires the one before
    memory.remember("ann", "My dog is called Rex")
    store.put(("memories", "ann", "drafts"), "d1", {"text": "I live in a draft namespace"})
    recalled = [i.text for i in memory.recall("ann", "where do I live", limit=3)]
    assert recalled[:1] == ["I live in Graz"] and set(recalled) == {"I live in Graz", "My dog is called Rex"}


def test_erasing_a_user_takes_everything_of_theirs_from_the_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    log = EpisodeLog(url)
    try:
        store = InMemoryStore()
        memory = StoreMemory(store, namespace=NS, log=log)
        dog = memory.remember("ann@example.com", "My dog is called Rex")
        memory.update("ann@example.com", dog.id, "My dog is called Max")  # the old text is in its history
        memory.remember("ann@example.com", "I live in Lyon")
        memory.remember("ann@example.com", "I live in Paris")  # Lyon retired
        memory.remember("bob", "I live in Oslo")
        result = erase_user(log, "ann@example.com", memory=memory)
        assert result.memories == 3
        left = [it for it in store.search((), limit=1000) if "ann" in "/".join(it.namespace)]
        assert left == []
        assert [i.text for i in memory.items("bob")] == ["I live in Oslo"]
    finally:
        log.close()


@pytest.mark.parametrize("user_id", ["ann@example.com", "x%y.z", "ünï.côde"])
def test_odd_user_ids_on_every_backend(memory: MemoryBackend, user_id: str) -> None:
    item = memory.remember(user_id, "I live in Lyon")
    memory.remember("ann@example", "My dog is called Rex")
    assert [r.text for r in memory.list(user_id)] == ["I live in Lyon"]
    assert [c.action for c in memory.history(user_id, item.id)] == [MemoryAction.CREATED]
    assert memory.forget_all(user_id) == 1
    assert [r.text for r in memory.list("ann@example")] == ["My dog is called Rex"]


class _RoundTrips(InMemoryStore):
    trips = 0

    def batch(self, ops: Any) -> Any:
        self.trips += 1
        return super().batch(ops)


def test_an_import_and_forgetting_it_take_a_few_round_trips_not_two_per_memory() -> None:
    store = _RoundTrips()
    memory = StoreMemory(store, namespace=NS)
    memory.remember_many("ann", [f"My note number {i} is about topic {i * 7}" for i in range(300)])
    assert store.trips <= 10
    notes = memory.list("ann")
    assert len(notes) > 250 and all(len(memory.history("ann", r.id)) == 1 for r in notes[:5])
    store.trips = 0
    assert memory.forget_all("ann") == len(notes)
    assert store.trips <= 10
    assert store.search(("memabra_history", "memories", "ann"), limit=10) == []


def test_a_long_history_is_read_whole() -> None:
    store = InMemoryStore()
    memory = StoreMemory(store, namespace=NS)
    item = memory.remember("ann", "I live in Lyon")
    hns = ("memabra_history", "memories", "ann")
    at = memory.clock().isoformat()
    for i in range(10_050):  # a memory restated on every turn for years
        store.put(hns, f"r{i}", {"memory_id": item.id, "action": "refreshed", "at": at, "new_text": "I live in Lyon"})
    assert len(memory.history("ann", item.id)) == 10_051


def test_two_asyncio_tasks_writing_one_user_store_each_fact_once() -> None:
    memory = StoreMemory(_SlowStore(), namespace=NS)

    async def both() -> None:
        await asyncio.gather(
            asyncio.to_thread(memory.remember, "ann", "My dog is called Rex"),
            asyncio.to_thread(memory.remember, "ann", "My dog is called Rex!"),
            asyncio.to_thread(memory.remember_many, "ann", ["I live in Lyon", "My dog is called Rex"]),
        )

    asyncio.run(both())
    assert sorted(i.text for i in memory.items("ann")) == ["I live in Lyon", "My dog is called Rex"]
    for record in memory.list("ann"):
        history = memory.history("ann", record.id)
        assert history[0].action is MemoryAction.CREATED and history[-1].new_text == record.text
