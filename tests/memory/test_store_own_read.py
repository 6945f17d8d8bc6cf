"""Each ``StoreMemory.remember`` settles against its own read of the user's memories.

What a write read used to reach the settling after it through a thread-local side channel: a
second write made on the same thread between the first one's read and its write (another user's,
from a supersession model's callback or any code that runs there) reset that channel, so the first
write settled against nothing and two values of a subject stayed current. The read now travels
with the write."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from memabra import StoreMemory
from memabra._facts import RuleFactExtractor
from memabra._memory_records import MemoryStatus

NS = ("memories", "{user_id}")


@pytest.fixture(params=["inmemory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    if request.param == "inmemory":
        yield InMemoryStore()
    elif request.param == "sqlite":
        sqlite_store = pytest.importorskip("langgraph.store.sqlite")
        with sqlite_store.SqliteStore.from_conn_string(str(tmp_path / "store.db")) as found:
            found.setup()
            yield found
    else:
        if not os.environ.get("MEMABRA_TEST_DATABASE_URL"):
            pytest.skip("MEMABRA_TEST_DATABASE_URL is not set")
        from langgraph.store.postgres import PostgresStore

        url = str(request.getfixturevalue("pg_schema_url")).replace("postgresql+psycopg://", "postgresql://")
        with PostgresStore.from_conn_string(url) as found:
            found.setup()
            yield found


class _Interleaved(RuleFactExtractor):
    """The rules, but the first time ann's write asks them, two other writes run first on this
    thread: ann's other process stores a new city, and this process stores a fact of bob's."""

    def __init__(self, store: BaseStore) -> None:
        self.other_process = StoreMemory(store, namespace=NS)
        self.this_process: StoreMemory | None = None
        self.armed = True

    def superseded(self, fact: str, existing: Sequence[tuple[str, str]]) -> list[str]:
        if self.armed and fact == "I live in Lyon":
            self.armed = False
            self.other_process.remember("ann", "I live in Paris")
            assert self.this_process is not None
            self.this_process.remember("bob", "I like jazz")
        return super().superseded(fact, existing)


def test_a_write_interleaved_with_another_users_write_settles_against_its_own_read(store: BaseStore) -> None:
    rules = _Interleaved(store)
    memory = StoreMemory(store, namespace=NS, supersession=rules)
    rules.this_process = memory
    memory.remember("ann", "I like tea")

    memory.remember("ann", "I live in Lyon")

    # Paris was written after ann's read and before her write: her write is the later one and
    # retires it, as it would have had the two been made one after the other
    assert sorted(i.text for i in memory.items("ann")) == ["I like tea", "I live in Lyon"]
    paris = next(r for r in memory.list("ann") if r.text == "I live in Paris")
    assert paris.status is MemoryStatus.RETIRED
    assert [i.text for i in memory.items("bob")] == ["I like jazz"]


def test_an_import_of_one_user_leaves_nothing_for_the_next_write_of_another(store: BaseStore) -> None:
    memory = StoreMemory(store, namespace=NS)
    memory.remember_many("bob", ["I like jazz", "I live in Rome"])
    memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "I live in Oslo")
    assert [i.text for i in memory.items("ann")] == ["I live in Oslo"]
    assert sorted(i.text for i in memory.items("bob")) == ["I like jazz", "I live in Rome"]
