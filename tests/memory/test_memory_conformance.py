"""``check_memory_backend``: both built-in backends keep every documented memory contract (SQLMemory
on SQLite and PostgreSQL, StoreMemory on InMemoryStore, an indexed InMemoryStore, SqliteStore and PostgresStore),
and deliberately broken backends fail it with a message naming the contract they break."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore
from memory_helpers import hashing_embed

from memabra import InvalidRecordError, MemoryBackend, SQLMemory, StoreMemory, check_memory_backend
from memabra._memory_conformance import MemoryBackendFactory, all_checks
from memabra._memory_records import MemoryAction, MemoryChange
from memabra._recall import RECALL_LIMIT
from memabra._records import CandidateKind, RegistryItem
from memabra._text import approx_tokens
from memabra.storage import EpisodeLog, upgrade

CONTRACTS = [name for name, _, _ in all_checks()]


def _factory(memory: MemoryBackend, log: EpisodeLog) -> MemoryBackendFactory:
    """A new backend over the fixture's storage on each call (the checks write users of their own)."""
    if isinstance(memory, SQLMemory):
        return lambda: SQLMemory(log)
    assert isinstance(memory, StoreMemory)
    return lambda: StoreMemory(memory.store, log=log)


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[EpisodeLog]:
    """The broken backends' log: what they break is theirs, not the database's."""
    url = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(url)
    log = EpisodeLog(url)
    yield log
    log.close()


def test_the_built_in_backends_keep_every_contract(memory_log: tuple[MemoryBackend, EpisodeLog]) -> None:
    memory, log = memory_log
    check_memory_backend(_factory(memory, log))


def test_an_indexed_store_keeps_every_contract() -> None:
    """Recall through the store's vector search instead of memabra's own ranking."""
    store = InMemoryStore(index={"dims": 64, "embed": hashing_embed, "fields": ["text"]})
    check_memory_backend(lambda: StoreMemory(store))


def test_a_sqlite_store_keeps_every_contract(tmp_path: Path) -> None:
    """SqliteStore's INSERT OR REPLACE gives an item a new created_at at every put, as
    InMemoryStore does: the memory's creation time is carried in the item's value."""
    from langgraph.store.sqlite import SqliteStore

    with SqliteStore.from_conn_string(str(tmp_path / "store.db")) as store:
        store.setup()
        check_memory_backend(lambda: StoreMemory(store))


# ---------------------------------------------------------------------- broken backends


class _RecallCachedByQuery(SQLMemory):
    """Caches recall by the query alone: the next user asking the same thing gets the first's."""

    def __init__(self, log: EpisodeLog) -> None:
        super().__init__(log)
        self._cache: dict[str, list[RegistryItem]] = {}

    def recall(self, user_id: str, query: str, *, limit: int = RECALL_LIMIT) -> list[RegistryItem]:
        if query not in self._cache:
            self._cache[query] = super().recall(user_id, query, limit=limit)
        return self._cache[query]


class _RefreshAppends(SQLMemory):
    """An append-only store's ``_refresh``: the restatement is added as a new memory."""

    def _refresh(self, change: MemoryChange) -> None:
        text = change.new_text or ""
        copy = RegistryItem(
            kind=CandidateKind.MEMORY,
            id=f"mem:{self.new_id()[:16]}",
            owner=change.user_id,
            text=text,
            tokens=approx_tokens(text),
            created_at=change.at,
        )
        self._store(copy, MemoryChange(copy.id, change.user_id, MemoryAction.CREATED, change.at, None, text))


class _ForgetKeepsHistory(StoreMemory):
    """Deletes the memories and leaves their history namespace behind."""

    def _forget(self, user_id: str, memory_ids: Sequence[str] | None) -> int:
        ns = self.namespace_for(user_id)
        held = [r.id for r in self.records(user_id)]
        ids = held if memory_ids is None else list(memory_ids)
        for memory_id in ids:
            if memory_id not in held:
                raise InvalidRecordError(f"user {user_id!r} has no memory {memory_id!r}")
        self.store.batch([PutOp(ns, memory_id, None) for memory_id in ids])
        return len(ids)


class _StoreIgnoresRetire(StoreMemory):
    """Writes the new memory and drops what it retires and cuts."""

    def _store(
        self,
        item: RegistryItem,
        change: MemoryChange,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[MemoryChange] = (),
    ) -> None:
        super()._store(item, change)


def test_a_backend_leaking_another_users_memories_fails_isolation(sqlite_log: EpisodeLog) -> None:
    with pytest.raises(AssertionError, match=r"^users are isolated: recall/search of 'conformance-isolation-bob'"):
        check_memory_backend(lambda: _RecallCachedByQuery(sqlite_log))


def test_a_backend_duplicating_restatements_fails_the_refresh_contract(sqlite_log: EpisodeLog) -> None:
    with pytest.raises(
        AssertionError,
        match=r"^a restatement refreshes the stored memory: a restatement must refresh the stored memory, not add one",
    ):
        check_memory_backend(lambda: _RefreshAppends(sqlite_log))


def test_a_forget_that_keeps_history_fails_the_forget_contract() -> None:
    store = InMemoryStore()
    with pytest.raises(
        AssertionError,
        match=r"^forget and forget_all delete memories and their history: remember_many skipped a fact whose "
        r"memory was forgotten: _forget must delete the memory's history too",
    ):
        check_memory_backend(lambda: _ForgetKeepsHistory(store))


def test_a_store_dropping_retirements_fails_the_supersession_contract() -> None:
    store = InMemoryStore()
    with pytest.raises(AssertionError, match=r"^a new value retires the one it replaces: after 'I moved to Hobart'"):
        check_memory_backend(lambda: _StoreIgnoresRetire(store))


# ---------------------------------------------------------------------- what the factory must be


def test_the_factory_must_build_memory_backends(sqlite_log: EpisodeLog) -> None:
    with pytest.raises(TypeError, match="takes a function that builds a new, empty backend"):
        check_memory_backend(SQLMemory(sqlite_log))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="returned a dict, not a MemoryBackend"):
        check_memory_backend(lambda: {})  # type: ignore[arg-type,return-value]


def test_a_backend_holding_the_suites_users_is_refused(sqlite_log: EpisodeLog) -> None:
    SQLMemory(sqlite_log).remember("conformance-isolation-ann", "I like jazz")
    with pytest.raises(AssertionError, match=r"holds \['I like jazz'\] before the check wrote any"):
        check_memory_backend(lambda: SQLMemory(sqlite_log))


def test_the_suite_runs_again_on_the_same_storage(memory_log: tuple[MemoryBackend, EpisodeLog]) -> None:
    """A team runs it against a persistent development database: a passed run leaves nothing behind."""
    memory, log = memory_log
    check_memory_backend(_factory(memory, log))
    check_memory_backend(_factory(memory, log))
