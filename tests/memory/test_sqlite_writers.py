"""Memory and embedding writes that read before they write, against another process's write on
the same SQLite file: they wait for its lock (``BEGIN IMMEDIATE``) instead of failing at once.

A deferred transaction that has read cannot take the write lock once another connection has
committed since its read (SQLite answers "database is locked" at once, without its busy
handler): several agent processes on one file lost a fifth of their turns that way."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from memabra import SQLMemory
from memabra.storage import EmbeddingTable, EpisodeLog

# long enough that the writer under test has read and is waiting for the lock when it is freed
_HOLD_S = 0.5


def _while_another_process_writes(path: str, work: Callable[[], object]) -> list[BaseException]:
    """Run ``work`` while another connection holds the write lock, and commits a change after it
    has started; the errors ``work`` raised."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE memory_pools SET generation = generation + 1")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(_HOLD_S)
    holder.execute("COMMIT")
    holder.close()
    thread.join(30)
    assert not thread.is_alive()
    return errors


@pytest.fixture
def sqlite_path(migrated_url: str) -> str:
    if not migrated_url.startswith("sqlite"):
        pytest.skip("SQLite's file lock")
    return migrated_url.removeprefix("sqlite:///")


def test_a_memory_update_waits_for_another_process_s_write(migrated_url: str, sqlite_path: str) -> None:
    with EpisodeLog(migrated_url) as log:
        memory = SQLMemory(log)
        stored = memory.remember("ann", "I live in Lyon")
        errors = _while_another_process_writes(sqlite_path, lambda: memory.update("ann", stored.id, "I live in Oslo"))
        assert errors == []
        assert memory.get("ann", stored.id).text == "I live in Oslo"


def test_a_restatement_waits_for_another_process_s_write(migrated_url: str, sqlite_path: str) -> None:
    with EpisodeLog(migrated_url) as log:
        memory = SQLMemory(log)
        memory.remember("ann", "I live in Lyon")
        errors = _while_another_process_writes(sqlite_path, lambda: memory.remember("ann", "I live in Lyon"))
        assert errors == []
        assert [r.text for r in memory.list("ann")] == ["I live in Lyon"]


def test_an_embedding_save_waits_for_another_process_s_write(migrated_url: str, sqlite_path: str) -> None:
    with EpisodeLog(migrated_url) as log:
        table = EmbeddingTable(log.engine)
        table.save("enc", {"first": np.ones(4, dtype=np.float32)})
        vector = np.arange(4, dtype=np.float32)
        errors = _while_another_process_writes(sqlite_path, lambda: table.save("enc", {"a text": vector}))
        assert errors == []
        assert np.array_equal(table.load("enc", ["a text"])["a text"], vector)
