"""A memory write is all or nothing: a process dying in the middle of ``remember`` never leaves a
new fact current beside the memory it replaces.

"I moved to Hobart" retires "I live in Lyon", or cuts "I live in Lyon" out of "I live in Lyon and
my dog is called Rex". On the SQL registry the new fact, each retirement, each cut, their history
entries and the pool's generation are one transaction: the tests make the database refuse each
write statement in turn (the process dying right there) and find the store as it was before the
write, or as after it, never between. An import killed halfway and run again ends as an
uninterrupted one. A LangGraph store has no transactions: the new fact names what it retires and
cuts, and the next read finishes it (tested by failing each store put in turn)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from sqlalchemy import event

from memabra import SQLMemory, StoreMemory
from memabra._memory import MemoryBackend
from memabra._memory_records import MemoryAction, MemoryStatus
from memabra._memory_restore import restore_memory
from memabra.storage import EpisodeLog

JOINED = "I live in Lyon and my dog is called Rex"
_AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_WRITES = ("INSERT", "UPDATE", "DELETE")


class _DiesAtWrite:
    """Makes the database refuse the ``at``-th write statement (from 0) once armed: the process
    dying right before it. Reads are never refused."""

    def __init__(self, at: int) -> None:
        self.at, self.seen, self.armed = at, 0, False

    def __call__(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not self.armed or not statement.lstrip().upper().startswith(_WRITES):
            return
        if self.seen == self.at:
            raise RuntimeError("the process died")
        self.seen += 1


@pytest.fixture
def dying_sql(log: EpisodeLog) -> Iterator[Callable[[int], tuple[SQLMemory, _DiesAtWrite]]]:
    """A fresh ``SQLMemory`` (fixed clock, ids counted from 0) and a hook that dies at the given
    write, replacing the hook made before."""
    hooks: list[_DiesAtWrite] = []

    def make(at: int) -> tuple[SQLMemory, _DiesAtWrite]:
        while hooks:
            event.remove(log.engine, "before_cursor_execute", hooks.pop())
        counter = itertools.count()
        memory = SQLMemory(log, clock=lambda: _AT, new_id=lambda: f"{next(counter):016d}")
        hook = _DiesAtWrite(at)
        event.listen(log.engine, "before_cursor_execute", hook)
        hooks.append(hook)
        return memory, hook

    yield make
    for hook in hooks:
        event.remove(log.engine, "before_cursor_execute", hook)


def _state(memory: SQLMemory, user_id: str) -> tuple[object, ...]:
    """Everything a write may change of one user: memories, their history, the pool generation."""
    records = memory.list(user_id)
    return (
        tuple((r.id, r.text, r.status, r.superseded_by, r.updated_at) for r in records),
        tuple(
            (c.memory_id, c.action, c.old_text, c.new_text, c.reason)
            for r in records
            for c in memory.history(user_id, r.id)
        ),
        memory._registry.generation(user_id),
    )


def _as_seen(memory: SQLMemory, user_id: str) -> tuple[object, ...]:
    """``_state`` with memory ids numbered in list order: a re-run draws new ids for what it writes."""
    records, history, generation = _state(memory, user_id)
    names = {str(r[0]): f"#{n}" for n, r in enumerate(records)}  # type: ignore[index]

    def named(value: object) -> object:
        if isinstance(value, str):
            for memory_id, name in names.items():
                value = value.replace(memory_id, name)
        return value

    return tuple(tuple(tuple(named(v) for v in row) for row in part) for part in (records, history)), generation  # type: ignore[union-attr]


def _torn(memory: MemoryBackend, user_id: str) -> bool:
    """The contradiction a torn write leaves: the new city current beside the old one."""
    current = {i.text for i in memory.items(user_id)}
    return "I moved to Hobart" in current and bool(current & {JOINED, "I live in Lyon"})


def _id_of(memory: MemoryBackend, user_id: str, text: str) -> str:
    return next(r.id for r in memory.list(user_id) if r.text == text)


# (memories stored first, the write that may die midway)
WRITES: dict[str, tuple[list[str], Callable[[MemoryBackend, str], object]]] = {
    "a cut": ([JOINED], lambda m, u: m.remember(u, "I moved to Hobart")),
    "a correction that cuts": ([JOINED], lambda m, u: m.remember(u, "I already told you, I moved to Hobart")),
    "a retirement": (["I live in Lyon"], lambda m, u: m.remember(u, "I moved to Hobart")),
    "a retirement and a cut": (
        ["My cat is called Tom", JOINED],
        lambda m, u: m.remember(u, "I moved to Hobart and my cat is called Felix"),
    ),
    "a restatement": (["I live in Lyon"], lambda m, u: m.remember(u, "i live in LYON!")),
    "an update": ([JOINED], lambda m, u: m.update(u, m.items(u)[0].id, "I live in Hobart")),
    # restoring "I live in Lyon" with replace cuts the move out of the joined memory that retired it
    "a restore that cuts": (
        ["I live in Lyon", "I moved to Hobart and my dog is called Rex"],
        lambda m, u: restore_memory(m, u, _id_of(m, u, "I live in Lyon"), replace=True, at=_AT),
    ),
}


@pytest.mark.parametrize("what", list(WRITES))
def test_a_write_that_dies_at_any_statement_leaves_all_of_it_or_none(
    dying_sql: Callable[[int], tuple[SQLMemory, _DiesAtWrite]], what: str
) -> None:
    setup, write = WRITES[what]

    def prepared(user_id: str, at: int) -> tuple[SQLMemory, _DiesAtWrite]:
        memory, hook = dying_sql(at)
        for text in setup:
            memory.remember(user_id, text)
        hook.armed = True
        return memory, hook

    reference, _ = prepared("reference", -1)
    before = _state(reference, "reference")
    write(reference, "reference")
    after = _state(reference, "reference")
    assert after != before
    for at in itertools.count():
        user_id = f"ann{at}"
        memory, hook = prepared(user_id, at)
        try:
            write(memory, user_id)
        except RuntimeError:
            assert _state(memory, user_id) == before, f"{what}: died at write statement {at}, left half of it"
            assert not _torn(memory, user_id)
            continue
        assert _state(memory, user_id) == after
        assert at > 0, "the write was never interrupted"
        break


def test_a_cut_and_its_new_fact_are_written_in_one_transaction(
    dying_sql: Callable[[int], tuple[SQLMemory, _DiesAtWrite]],
) -> None:
    """The colleague's report as a user sees it: the new fact and the cut were two commits, so a
    process killed between them kept "I moved to Hobart" beside the uncut Lyon memory."""
    memory, hook = dying_sql(-1)
    joined = memory.remember("ann", JOINED)
    hook.armed = True
    committed: list[int] = []  # write statements seen at each commit (reads commit too)

    def on_commit(conn: Any) -> None:
        committed.append(hook.seen)

    event.listen(memory.log.engine, "commit", on_commit)
    try:
        memory.remember("ann", "I moved to Hobart")
    finally:
        event.remove(memory.log.engine, "commit", on_commit)
    write_commits = sorted(set(committed) - {0})
    assert write_commits == [hook.seen], f"{len(write_commits)} write transactions"
    assert {i.text for i in memory.items("ann")} == {"My dog is called Rex", "I moved to Hobart"}
    assert [c.action for c in memory.history("ann", joined.id)] == [MemoryAction.CREATED, MemoryAction.UPDATED]


def test_an_import_killed_midway_and_run_again_ends_as_an_uninterrupted_one(
    dying_sql: Callable[[int], tuple[SQLMemory, _DiesAtWrite]],
) -> None:
    lines = ["My cat is called Tom", "I moved to Hobart", "I work as a nurse"]
    reference, _ = dying_sql(-1)
    reference.remember("reference", JOINED)
    reference.remember_many("reference", lines)
    expected = _as_seen(reference, "reference")[0]
    for at in itertools.count():
        user_id = f"ann{at}"
        memory, hook = dying_sql(at)
        memory.remember(user_id, JOINED)
        hook.armed = True
        try:
            memory.remember_many(user_id, lines)
        except RuntimeError:
            assert not _torn(memory, user_id), f"killed at write statement {at}: Hobart beside Lyon"
            hook.armed = False
            memory.remember_many(user_id, lines)  # run again
            assert _as_seen(memory, user_id)[0] == expected, f"killed at write statement {at}, then run again"
            continue
        assert at > 0
        break


# ---------------------------------------------------------------------------- LangGraph stores


class _DyingStore(InMemoryStore):
    """Refuses the ``at``-th put (from 0; a batch counts as one) once armed: the process dying."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.seen, self.armed = at, 0, False

    def _dies(self) -> None:
        if self.armed:
            if self.seen == self.at:
                raise RuntimeError("the process died")
            self.seen += 1

    def put(self, *args: Any, **kwargs: Any) -> None:
        self._dies()
        super().put(*args, **kwargs)

    def batch(self, ops: Any) -> Any:
        if any(type(op).__name__ == "PutOp" for op in ops):
            self._dies()
        return super().batch(ops)


@pytest.mark.parametrize("what", [w for w in WRITES if w != "an update"])
def test_a_store_write_that_dies_at_any_put_is_finished_by_the_next_read(what: str) -> None:
    setup, write = WRITES[what]
    reference = StoreMemory(InMemoryStore(), clock=lambda: _AT)
    for text in setup:
        reference.remember("ann", text)
    write(reference, "ann")
    after = {r.text: (r.status, [c.action for c in reference.history("ann", r.id)]) for r in reference.list("ann")}
    for at in itertools.count():
        store = _DyingStore(at)
        memory = StoreMemory(store, clock=lambda: _AT)
        for text in setup:
            memory.remember("ann", text)
        before_texts = {i.text for i in memory.items("ann")}  # a setup may retire one of its own
        store.armed = True
        try:
            write(memory, "ann")
        except RuntimeError:
            store.armed = False
            current = {i.text for i in memory.items("ann")}  # the next read
            assert current in (before_texts, {t for t, (s, _) in after.items() if s is MemoryStatus.ACTIVE}), (
                f"{what}: died at put {at}, the next read shows {current}"
            )
            if current != before_texts:
                found = {
                    r.text: (r.status, [c.action for c in memory.history("ann", r.id)]) for r in memory.list("ann")
                }
                assert found == after, f"{what}: died at put {at}"
            continue
        assert at > 0
        break
