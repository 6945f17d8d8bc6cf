"""Memory management on the registry table: status, history, forgetting (which also blanks the
log's copies of the text and deletes the text's stored embeddings, ``_embeddings``: that log side
of forgetting lives in ``_memory_scrub``).

:class:`MemoryRegistry` works on an :class:`~sqlalchemy.Engine` (an
:class:`~memabra.storage.EpisodeLog`'s); it takes and returns memabra records (``_memory_rows``
turns them into rows and back).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Engine, bindparam, func, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError, MemoriesChangedError
from memabra._memory_records import MemoryChange, MemoryRecord
from memabra._records import CandidateKind, RegistryItem
from memabra.storage import _convert as cv
from memabra.storage._memory_models import MemoryHistoryRow
from memabra.storage._memory_pools import GENERATION, bump, bump_from
from memabra.storage._memory_rows import history_row, history_values, memory_change, memory_record, registry_values
from memabra.storage._memory_scrub import chunks, erase_owned, forget, forget_in_log, scrub_log
from memabra.storage._models import DecisionCandidateRow, DecisionRow, RegistryRow, table_of
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = ["MemoryRegistry", "erase_owned", "forget_in_log", "last_chosen", "scrub_log"]

_MEMORY = CandidateKind.MEMORY.value


# Built once: remember() runs this per write, and building the statement cost more than running it.
_ACTIVE_TEXTS = (
    select(RegistryRow.id, RegistryRow.text)
    .where(
        RegistryRow.kind == _MEMORY,
        RegistryRow.owner == bindparam("owner"),
        RegistryRow.deleted_at.is_(None),
        RegistryRow.retired_at.is_(None),
    )
    .order_by(RegistryRow.created_at, RegistryRow.id)
)


class MemoryRegistry:
    """Memories of each user in the registry table, with their status and history."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # writes read before they write: on SQLite they must begin IMMEDIATE, and be retried
        self._tx = Transactions(engine)

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self._engine, expire_on_commit=False) as session, session.begin():
            yield session

    # ------------------------------------------------------------------ reading

    def active_items(self, user_id: str) -> list[RegistryItem]:
        """The user's memories that may be recalled, oldest first."""
        user_id = _need_user(user_id)
        stmt = (
            select(RegistryRow)
            .where(
                RegistryRow.kind == _MEMORY,
                RegistryRow.owner == user_id,
                RegistryRow.deleted_at.is_(None),
                RegistryRow.retired_at.is_(None),
            )
            .order_by(RegistryRow.created_at, RegistryRow.id)
        )
        with self._session() as s:
            return [cv.registry_from_row(r) for r in s.scalars(stmt)]

    def active_texts(self, user_id: str) -> list[tuple[str, str]]:
        """``(id, text)`` of the user's recallable memories, without building records."""
        user_id = _need_user(user_id)
        with self._engine.connect() as conn:
            return [(str(i), str(t)) for i, t in conn.execute(_ACTIVE_TEXTS, {"owner": user_id}).all()]

    def known_texts(self, user_id: str) -> list[str]:
        """Every text the user's memories have or had: the recallable ones, and each text a
        memory's history passed through (created, refreshed, updated, cut, retired), in one read of
        the history; a forgotten memory's history goes with it. What an import skips restating."""
        user_id = _need_user(user_id)
        t = MemoryHistoryRow
        with self._engine.connect() as conn:
            past = conn.execute(select(t.old_text, t.new_text).where(t.owner == user_id)).all()
        return [str(text) for row in past for text in row if text] + [text for _, text in self.active_texts(user_id)]

    def generation(self, user_id: str) -> int:
        """Moves with every write to the user's memories through this class (one key lookup)."""
        with self._engine.connect() as conn:
            found = conn.execute(GENERATION, {"owner": clean_text(user_id)}).scalar()
        return int(found or 0)

    def records(self, user_id: str, *, include_retired: bool = True) -> list[MemoryRecord]:
        user_id = _need_user(user_id)
        stmt = select(RegistryRow).where(
            RegistryRow.kind == _MEMORY, RegistryRow.owner == user_id, RegistryRow.deleted_at.is_(None)
        )
        if not include_retired:
            stmt = stmt.where(RegistryRow.retired_at.is_(None))
        with self._session() as s:
            return [memory_record(r) for r in s.scalars(stmt.order_by(RegistryRow.created_at, RegistryRow.id))]

    def record(self, user_id: str, memory_id: str) -> MemoryRecord:
        with self._session() as s:
            return memory_record(_row(s, user_id, memory_id))

    def history(self, user_id: str, memory_id: str) -> list[MemoryChange]:
        t = MemoryHistoryRow
        stmt = (
            select(t).where(t.owner == clean_text(user_id), t.memory_id == clean_text(memory_id)).order_by(t.at, t.id)
        )
        with self._session() as s:
            return [memory_change(r) for r in s.scalars(stmt)]

    # ------------------------------------------------------------------ writing

    def write(
        self,
        item: RegistryItem,
        change: MemoryChange,
        *,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[tuple[MemoryChange, int]] = (),
        read_at: int | None = None,
    ) -> None:
        """Insert or replace ``item`` and record ``change``; retire the memories named in
        ``retire`` (superseded by ``item``) and cut each memory of ``cut`` down to the change's
        ``new_text`` (with its token count), all in one transaction: a process dying midway leaves
        the store as it was, never the new fact beside the memory it replaces. ``read_at``: the
        user's :meth:`generation` when the read this write was decided on began; where another
        write has moved it since, nothing is written and :class:`MemoriesChangedError` says so."""
        if item.kind is not CandidateKind.MEMORY:
            raise InvalidRecordError(f"MemoryRegistry stores memories, got a {item.kind.value}")
        values = registry_values(item)
        owner = str(values["owner"])

        def work(s: Session) -> None:
            # the user's generation row first, before any memory row (the flush below of a forgotten
            # row this write replaces): the lock order every writer of the user keeps (_locked_row)
            if read_at is None:
                bump(s.connection(), owner)
            elif not bump_from(s.connection(), owner, read_at):
                raise MemoriesChangedError(
                    f"user {owner!r}'s memories changed since the read this write was decided on"
                )
            existing = s.get(RegistryRow, (_MEMORY, values["owner"], values["id"]))
            if existing is None or existing.deleted_at is not None:
                if existing is not None:
                    s.delete(existing)
                    s.flush()
                s.add(RegistryRow(**{("metadata_" if k == "metadata" else k): v for k, v in values.items()}))
            else:
                for key in ("name", "text", "body", "tokens", "source", "updated_at"):
                    setattr(existing, key, values[key])
                existing.metadata_ = cast(dict[str, Any], values["metadata"])  # prepare() keeps it a dict
                existing.retired_at = None
                existing.superseded_by = None
            s.add(history_row(change))
            for old in retire:
                row = _row(s, old.user_id, old.memory_id)
                row.retired_at = old.at
                row.superseded_by = item.id
                s.add(history_row(old))
            for done, tokens in cut:
                _cut(s, done, tokens)

        self._tx.write(work, what="memory write")

    def write_many(self, items: Sequence[tuple[RegistryItem, MemoryChange]], *, read_at: int | None = None) -> None:
        """Insert new memories (ids not yet stored) and their history in one transaction.
        ``read_at``: as :meth:`write`'s, for memories of one user decided on one read of theirs
        (an import's facts that supersede nothing): where another write has moved the user's
        generation since, nothing is written and :class:`MemoriesChangedError` says so."""
        if not items:
            return
        for item, _ in items:
            if item.kind is not CandidateKind.MEMORY:
                raise InvalidRecordError(f"MemoryRegistry stores memories, got a {item.kind.value}")
        rows = [{**registry_values(item), "retired_at": None, "superseded_by": None} for item, _ in items]
        history = [history_values(change) for _, change in items]
        owners = sorted({str(row["owner"]) for row in rows})
        if read_at is not None and len(owners) > 1:
            raise InvalidRecordError(f"a write decided on one read is of one user's memories, got {len(owners)} users")

        def work(conn: Connection) -> None:
            # checked first: a write that is refused inserts nothing, and the row lock it takes on
            # PostgreSQL holds off another writer of the user until this one commits
            if read_at is not None and not bump_from(conn, owners[0], read_at):
                raise MemoriesChangedError(
                    f"user {owners[0]!r}'s memories changed since the read this write was decided on"
                )
            conn.execute(table_of(RegistryRow).insert(), rows)
            conn.execute(table_of(MemoryHistoryRow).insert(), history)
            if read_at is None:
                for owner in owners:
                    bump(conn, owner)

        self._tx.write_connection(work, what="memory write")

    def refresh(self, change: MemoryChange, tokens: int) -> None:
        """A restatement: the memory takes the newest wording (``change.new_text``) and moves its
        update time; its id, counters and creation time stay."""

        def work(s: Session) -> None:
            row = _locked_row(s, change)
            if row.retired_at is not None:  # retired since the caller read it: a retired text stays as it was
                raise InvalidRecordError(f"memory {change.memory_id!r} is retired")
            row.updated_at = change.at
            if change.new_text:
                text = clean_text(change.new_text)
                row.text, row.tokens, row.name = text, tokens, text[:60]
            s.add(history_row(change))

        self._tx.write(work, what="memory refresh")

    def set_retired(self, change: MemoryChange, *, retired: bool) -> None:
        """Retire a memory by hand (kept with its history, never recalled) or restore a retired one
        (recalled again, no longer superseded), recording ``change`` in the same transaction."""

        def work(s: Session) -> None:
            row = _locked_row(s, change)
            if (row.retired_at is not None) == retired:
                state = "retired" if retired else "active"
                raise InvalidRecordError(f"memory {change.memory_id!r} is already {state}; nothing changed")
            row.retired_at = change.at if retired else None
            if not retired:
                row.superseded_by = None
            s.add(history_row(change))

        self._tx.write(work, what="memory retire" if retired else "memory restore")

    def forget(self, user_id: str, memory_ids: Sequence[str] | None = None) -> int:
        """Delete memories (all of the user's when ``memory_ids`` is None) with their history;
        the episode log keeps their ids for the decisions that offered them, not their text."""
        user_id = _need_user(user_id)
        return self._tx.write(lambda s: forget(s, user_id, memory_ids), what="forget memories")


def _cut(s: Session, change: MemoryChange, tokens: int) -> None:
    """The memory of ``change`` cut down to ``change.new_text``, unless it changed since the write
    read ``change.old_text`` (retired, forgotten, rewritten): that newer write stands."""
    key = (_MEMORY, clean_text(change.user_id), clean_text(change.memory_id))
    row = s.get(RegistryRow, key, with_for_update=True)  # PostgreSQL: no write slips in between
    if row is None or row.deleted_at is not None or row.retired_at is not None:
        return
    if row.text != clean_text(change.old_text or ""):
        return
    text = clean_text(change.new_text or "")
    row.text, row.tokens, row.name, row.updated_at = text, tokens, text[:60], change.at
    s.add(history_row(change))


def last_chosen(engine: Engine, user_id: str, candidate_ids: Sequence[str]) -> dict[str, datetime]:
    """When the router last injected each candidate for ``user_id`` (absent: never)."""
    t, d = DecisionCandidateRow, DecisionRow
    user_id, candidate_ids = clean_text(user_id), [clean_text(c) for c in candidate_ids]
    out: dict[str, datetime] = {}
    with Session(engine) as s:
        for chunk in chunks(list(dict.fromkeys(candidate_ids))):
            stmt = (
                select(t.candidate_id, func.max(d.created_at))
                .join(d, d.id == t.decision_id)
                .where(t.user_id == user_id, t.chosen.is_(True), t.candidate_id.in_(chunk))
                .group_by(t.candidate_id)
            )
            out.update({str(cid): at for cid, at in s.execute(stmt) if at is not None})
    return out


def _need_user(user_id: str) -> str:
    """``user_id`` as the writes store it (:func:`clean_text`): a lookup with a NUL byte finds what
    a write with it stored, on both databases, instead of PostgreSQL refusing the query."""
    if not isinstance(user_id, str) or not clean_text(user_id):
        raise InvalidRecordError("memories are scoped by user: give a non-empty user_id")
    return clean_text(user_id)


def _row(s: Session, user_id: str, memory_id: str, *, locked: bool = False) -> RegistryRow:
    key = (_MEMORY, clean_text(user_id), clean_text(memory_id))
    row = s.get(RegistryRow, key, with_for_update=locked, populate_existing=locked)
    if row is None or row.deleted_at is not None:
        raise InvalidRecordError(f"user {user_id!r} has no memory {memory_id!r}")
    return row


def _locked_row(s: Session, change: MemoryChange) -> RegistryRow:
    """The memory of ``change``, for a change that first checks its state (retire, restore,
    refresh): two processes retiring one memory at once must not both read it active and both
    record the retirement. The user's generation row is bumped (locked on PostgreSQL) before the
    memory's row is read under its own lock: every write of the user's memories takes the
    generation row first and their rows after (:meth:`MemoryRegistry.write` superseding or
    updating this memory), so the other order would deadlock against it. A refusal rolls the bump
    back with the rest."""
    bump(s.connection(), clean_text(change.user_id))
    return _row(s, change.user_id, change.memory_id, locked=True)
