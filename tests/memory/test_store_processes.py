"""StoreMemory with several worker processes writing one user's memories at once, as agents on
one ``PostgresStore`` (or ``SqliteStore`` file) do: the lock that makes a user's writers take turns
holds in one process only. Before the settling of ``memabra._store_settle``, a fact stated in two
processes was stored twice and two cities stayed current. Also: items under the random keys of
older versions, and SqliteStore's timestamps."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from memabra import StoreMemory
from memabra._memory_records import MemoryAction, MemoryStatus

NS = ("memories", "{user_id}")
_WORKER = """
import sys, time, pathlib
kind, conn, fact, tag, folder = sys.argv[1:6]
if kind == "postgres":
    from langgraph.store.postgres import PostgresStore as Store
else:
    from langgraph.store.sqlite import SqliteStore as Store
from memabra import StoreMemory

class Slow(Store):
    # every worker reads the user's memories before any of them writes
    def search(self, *args, **kwargs):
        found = super().search(*args, **kwargs)
        time.sleep(0.3)
        return found

with Slow.from_conn_string(conn) as store:
    memory = StoreMemory(store, namespace=("memories", "{user_id}"))
    pathlib.Path(folder, "ready-" + tag).touch()
    while not pathlib.Path(folder, "go").exists():
        time.sleep(0.005)
    memory.remember("ann", fact)
"""
_FACTS = ("I live in Lyon", "I live in Lyon", "I live in Paris")


def _at_once(kind: str, conn: str, folder: Path) -> None:
    """Each of ``_FACTS`` remembered by a process of its own, all at once."""
    script = folder / "worker.py"
    script.write_text(_WORKER)
    workers = [
        subprocess.Popen([sys.executable, str(script), kind, conn, fact, str(n), str(folder)], stderr=subprocess.PIPE)
        for n, fact in enumerate(_FACTS)
    ]
    deadline = time.monotonic() + 60
    while len(list(folder.glob("ready-*"))) < len(workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    (folder / "go").touch()
    for w in workers:
        _, err = w.communicate(timeout=60)
        assert w.returncode == 0, err.decode()


def _settled(memory: StoreMemory) -> None:
    current = [i.text for i in memory.items("ann")]
    assert len(current) == 1 and current[0] in {"I live in Lyon", "I live in Paris"}
    listed = sorted((r.text, r.status) for r in memory.list("ann"))
    # the fact two processes stated is one memory; the other city is retired, with one retirement
    assert [text for text, _ in listed] == ["I live in Lyon", "I live in Paris"]
    retired = next(r for r in memory.list("ann") if r.status is MemoryStatus.RETIRED)
    history = [c.action for c in memory.history("ann", retired.id)]
    assert history[0] is MemoryAction.CREATED and history.count(MemoryAction.RETIRED) == 1
    assert retired.superseded_by == memory.items("ann")[0].id


def test_processes_writing_one_user_on_postgres_converge(pg_or_skip: str, tmp_path: Path) -> None:
    from langgraph.store.postgres import PostgresStore

    conn = pg_or_skip.replace("postgresql+psycopg://", "postgresql://")
    with PostgresStore.from_conn_string(conn) as store:
        store.setup()
        _at_once("postgres", conn, tmp_path)
        _settled(StoreMemory(store, namespace=NS))


@pytest.mark.xfail(
    strict=False,
    reason="known race, open: under CPU load (about 1 run in 6 with two busy cores) the three writers settle"
    " to NO current memory (both cities retired); seen in the clean-clone CI of session 27, next to fix",
)
def test_processes_writing_one_user_on_sqlite_converge(tmp_path: Path) -> None:
    sqlite_store = pytest.importorskip("langgraph.store.sqlite")
    conn = str(tmp_path / "store.db")
    with sqlite_store.SqliteStore.from_conn_string(conn) as store:
        store.setup()
        _at_once("sqlite", conn, tmp_path)
        _settled(StoreMemory(store, namespace=NS))


def test_sqlite_store_timestamps_are_read_as_utc() -> None:
    sqlite_store = pytest.importorskip("langgraph.store.sqlite")
    store = sqlite_store.SqliteStore(sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None))
    store.setup()
    memory = StoreMemory(store, namespace=NS)
    memory.remember("ann", "I live in Lyon")
    [record] = memory.list("ann")
    assert record.text == "I live in Lyon" and record.created_at.utcoffset() is not None


def test_memories_under_the_random_keys_of_older_versions_are_found_refreshed_and_retired() -> None:
    store = InMemoryStore()
    old = {"text": "I live in Lyon", "kind": "Memory", "content": {"content": "I live in Lyon"}, "status": "active"}
    store.put(("memories", "ann"), "mem:0123456789abcdef", old)
    store.put(("memories", "ann"), "mem:fedcba9876543210", {**old, "text": "My dog is called Rex"})
    memory = StoreMemory(store, namespace=NS)
    assert memory.remember("ann", "I live in Lyon!").id == "mem:0123456789abcdef"  # a restatement
    paris = memory.remember("ann", "I live in Paris")
    lyon = memory.get("ann", "mem:0123456789abcdef")
    assert lyon.status is MemoryStatus.RETIRED and lyon.superseded_by == paris.id
    assert sorted(i.text for i in memory.items("ann")) == ["I live in Paris", "My dog is called Rex"]
    assert len(memory.list("ann")) == 3


def test_a_fact_stated_again_after_its_retirement_leaves_the_retired_memory_as_it_was() -> None:
    memory = StoreMemory(InMemoryStore(), namespace=NS)
    lyon = memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "I live in Paris")
    again = memory.remember("ann", "I live in Lyon")
    assert again.id != lyon.id and memory.get("ann", lyon.id).status is MemoryStatus.RETIRED
    assert [c.action for c in memory.history("ann", lyon.id)] == [MemoryAction.CREATED, MemoryAction.RETIRED]
    assert [i.text for i in memory.items("ann")] == ["I live in Lyon"]


class _Interleaved(InMemoryStore):
    """Runs ``between`` on the first read of the user's memories: another process's write landing
    between this writer's read and its write."""

    between: list[Callable[[], object]] = []

    def search(self, *args: Any, **kwargs: Any) -> Any:
        found = super().search(*args, **kwargs)
        while self.between:
            self.between.pop()()
        return found


def test_a_joined_memory_written_meanwhile_loses_only_the_replaced_fact() -> None:
    store = _Interleaved()
    other = StoreMemory(store, namespace=NS)  # its own instance, as in another process
    store.between = [lambda: other.remember("ann", "I live in Lyon and my dog is called Rex")]
    StoreMemory(store, namespace=NS).remember("ann", "I live in Paris")
    assert sorted(i.text for i in other.items("ann")) == ["I live in Paris", "My dog is called Rex"]
