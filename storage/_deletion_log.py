"""The audit trail of episode deletions and user erasures.

A deleted episode leaves no row behind, so each run of :func:`~memabra.storage._retention.delete_episodes`
leaves one here instead: what it was asked to delete (named ids, a user, a cut-off time), who asked
and from where, how many matching episodes it kept for the learner, and how many it deleted. The
entry is written before the first chunk, its count grows in the transaction of each chunk, and it
is marked finished after the last: it never counts an episode that was not deleted, and a run that
died half way reads as unfinished with exactly what it removed. Dry runs leave no entry. An
erasure (:func:`~memabra.storage._retention.erase_user`) is one entry for the user's episodes and
memories, finished after both.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Exists, and_, exists, or_, select, tuple_, update
from sqlalchemy.orm import Session, aliased

from memabra._errors import InvalidRecordError
from memabra.storage._clock import database_now
from memabra.storage._models import DeletionRow
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = [
    "MAX_NAMED_KEPT",
    "DeletionEntry",
    "add_deleted",
    "deletion_history",
    "finish_deletion",
    "start_deletion",
    "unfinished_deletions",
]

# Named ids an entry keeps: an admin deletes one at a time, a script may name thousands, and the
# count (always kept) says how many there were.
MAX_NAMED_KEPT = 100

# Named ids a one-line description shows.
_IDS_DESCRIBED = 3

# Unfinished runs a status check reports (each on its own line; a few say what to do), and the
# page it reads them in (most were covered by a later run: a retention job that dies now and then).
_UNFINISHED_REPORTED = 20
_PAGE = 200

# Longest actor or client text kept (the columns' width).
_MAX_TEXT = 200


@dataclass(frozen=True, slots=True)
class DeletionEntry:
    """One deletion run. ``named``: how many ids it was given (0: none), ``episode_ids`` the first
    :data:`MAX_NAMED_KEPT` of them; ``user_id`` / ``created_before``: the other filters (``None``:
    not given). ``kept``: matching episodes kept because a learner had not read their reward.
    ``progressed_at``: when the last chunk was deleted (the start before any). ``finished_at`` is
    ``None`` while the run goes on, or for good when it died half way. ``memories_forgotten``: for
    a user's erasure (episodes and memories), the memories forgotten (0 until then); ``None`` for
    a deletion of episodes only. ``threads_deleted``: an erasure's conversation threads deleted
    from the agent's checkpointer (0 until then; ``None``: no checkpointer was given)."""

    id: str
    started_at: datetime
    progressed_at: datetime
    finished_at: datetime | None
    actor: str
    client: str | None
    named: int
    episode_ids: tuple[str, ...]
    user_id: str | None
    created_before: datetime | None
    include_unlearned: bool
    kept: int
    deleted: int
    memories_forgotten: int | None = None
    threads_deleted: int | None = None

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def erasure(self) -> bool:
        return self.memories_forgotten is not None

    def describe(self) -> str:
        """What the run was asked to delete, in one line."""
        parts = []
        if self.named:
            shown = ", ".join(self.episode_ids[:_IDS_DESCRIBED])
            more = f" and {self.named - _IDS_DESCRIBED} more" if self.named > _IDS_DESCRIBED else ""
            parts.append(f"episode{'s' if self.named > 1 else ''} {shown}{more}")
        if self.user_id is not None:
            parts.append(f"user {self.user_id}")
        if self.created_before is not None:
            parts.append(f"created before {self.created_before.strftime('%Y-%m-%d %H:%M:%S')} UTC")
        asked = ", ".join(parts)
        if self.erasure:
            if self.threads_deleted is not None:
                threads = f"{self.threads_deleted} checkpointer thread(s)" if self.finished else "checkpointer threads"
                return f"{asked}: episodes, memories and {threads} (erasure)"
            return f"{asked}: episodes and memories (erasure)"
        return f"{asked} (unlearned rewards too)" if self.include_unlearned else asked

    def covers(self, other: DeletionEntry) -> bool:
        """Whether this run, finished after ``other`` started, deleted everything ``other`` was asked
        to: every filter of this run is one ``other`` had or a wider one (a retention job that died
        is covered by the next day's run, with its later cut-off)."""
        if self.finished_at is None or self.started_at <= other.started_at:
            return False
        if other.erasure and not self.erasure:
            return False
        if self.named and not (
            other.named
            and self.named == len(self.episode_ids)
            and other.named == len(other.episode_ids)
            and set(other.episode_ids) <= set(self.episode_ids)
        ):
            return False
        if self.user_id is not None and self.user_id != other.user_id:
            return False
        if self.created_before is not None and (
            other.created_before is None or other.created_before > self.created_before
        ):
            return False
        return self.include_unlearned or not other.include_unlearned

    def rerun_command(self) -> str | None:
        """The ``memabra episodes delete`` command that asks for the same deletion (``None`` when
        the entry kept only the first of its named ids)."""
        if self.erasure and self.user_id is not None:
            command = shlex.join(["memabra", "erase", "--user", self.user_id])
            # the checkpointer's URL is not kept (it may hold a password): the command names its place
            return command if self.threads_deleted is None else f"{command} --checkpointer URL"
        if self.named > len(self.episode_ids):
            return None
        args = ["memabra", "episodes", "delete", *self.episode_ids]
        if self.user_id is not None:
            args += ["--user", self.user_id]
        if self.created_before is not None:
            args += ["--before", self.created_before.isoformat()]
        if self.include_unlearned:
            args.append("--include-unlearned")
        return shlex.join(args)


def start_deletion(
    tx: Transactions,
    *,
    actor: str,
    client: str | None,
    episode_ids: Sequence[str] | None,
    user_id: str | None,
    created_before: datetime | None,
    include_unlearned: bool,
    kept: int,
    erasure: bool = False,
    threads: bool = False,
) -> str:
    """Write the entry of a run about to delete; returns its id. ``erasure``: the run forgets the
    user's memories too, ``threads``: and deletes their checkpointer threads (:func:`finish_deletion`
    records how many)."""
    actor = clean_text(actor).strip()
    entry_id = uuid.uuid4().hex
    row = DeletionRow(
        id=entry_id,
        finished_at=None,
        actor=actor[:_MAX_TEXT],
        client=None if client is None else clean_text(client)[:_MAX_TEXT],
        named=0 if episode_ids is None else len(episode_ids),
        episode_ids=[] if episode_ids is None else list(episode_ids[:MAX_NAMED_KEPT]),
        user_id=None if user_id is None else clean_text(user_id),
        created_before=created_before,
        include_unlearned=include_unlearned,
        kept=kept,
        deleted=0,
        memories_forgotten=0 if erasure else None,
        threads_deleted=0 if threads else None,
    )

    def work(s: Session) -> None:
        # the database's clock, as every stamp here: which run came later (covers()) is decided
        # between runs of several hosts, whose own clocks may be minutes apart
        row.started_at = row.progressed_at = database_now(s)
        s.add(row)

    tx.write(work, what="start_deletion")
    return entry_id


def add_deleted(s: Session, entry_id: str, n: int) -> None:
    """Count ``n`` more deleted episodes, in the caller's transaction (the one that deleted them)."""
    s.execute(
        update(DeletionRow)
        .where(DeletionRow.id == entry_id)
        .values(deleted=DeletionRow.deleted + n, progressed_at=database_now(s))
    )


def finish_deletion(
    tx: Transactions, entry_id: str, *, memories_forgotten: int | None = None, threads_deleted: int | None = None
) -> None:
    def work(s: Session) -> None:
        values: dict[str, object] = {"finished_at": database_now(s)}
        if memories_forgotten is not None:
            values["memories_forgotten"] = memories_forgotten
        if threads_deleted is not None:
            values["threads_deleted"] = threads_deleted
        s.execute(update(DeletionRow).where(DeletionRow.id == entry_id).values(**values))

    tx.write(work, what="finish_deletion")


def deletion_history(
    tx: Transactions, *, limit: int, after: str | None = None, user_id: str | None = None
) -> list[DeletionEntry]:
    """Entries newest first; ``after``: only those listed after that entry (older; keyset paging
    by entry id); ``user_id``: only runs that were given that user."""
    if limit < 1:
        raise InvalidRecordError(f"limit must be at least 1, got {limit}")
    stmt = select(DeletionRow)
    with tx.read() as s:
        if after is not None:
            cursor = s.execute(
                select(DeletionRow.started_at, DeletionRow.id).where(DeletionRow.id == clean_text(after))
            ).one_or_none()
            if cursor is None:
                raise InvalidRecordError(f"no deletion entry with id {after!r} to list after")
            stmt = stmt.where(tuple_(DeletionRow.started_at, DeletionRow.id) < tuple_(*cursor))
        if user_id is not None:
            stmt = stmt.where(DeletionRow.user_id == clean_text(user_id))
        stmt = stmt.order_by(DeletionRow.started_at.desc(), DeletionRow.id.desc()).limit(limit)
        return [_entry(row) for row in s.scalars(stmt)]


def unfinished_deletions(s: Session) -> tuple[DeletionEntry, ...]:
    """Runs with no finish recorded that no later finished run covers (:meth:`DeletionEntry.covers`),
    the longest without progress first: running, or died with part of their work undone. Every
    unfinished run is weighed against every later finished one, however many there are."""
    open_runs: list[DeletionEntry] = []
    after: tuple[datetime, str] | None = None
    while len(open_runs) < _UNFINISHED_REPORTED:
        stmt = select(DeletionRow).where(DeletionRow.finished_at.is_(None), ~_covered_without_ids())
        if after is not None:
            stmt = stmt.where(tuple_(DeletionRow.progressed_at, DeletionRow.id) > after)
        page = [_entry(row) for row in s.scalars(stmt.order_by(DeletionRow.progressed_at, DeletionRow.id).limit(_PAGE))]
        open_runs += [entry for entry in page if not (entry.named and _covered_by_named(s, entry))]
        if len(page) < _PAGE:
            break
        after = (page[-1].progressed_at, page[-1].id)
    return tuple(open_runs[:_UNFINISHED_REPORTED])


def _covered_without_ids() -> Exists:
    """Whether a later finished run that named no ids covers the row: :meth:`DeletionEntry.covers`
    in SQL for such runs, so a log of many dead, covered runs is weighed in one query."""
    run, later = DeletionRow, aliased(DeletionRow)
    return exists().where(
        later.finished_at.is_not(None),
        later.started_at > run.started_at,
        later.named == 0,
        or_(run.memories_forgotten.is_(None), later.memories_forgotten.is_not(None)),
        or_(later.user_id.is_(None), later.user_id == run.user_id),
        or_(
            later.created_before.is_(None),
            and_(run.created_before.is_not(None), later.created_before >= run.created_before),
        ),
        or_(later.include_unlearned.is_(True), run.include_unlearned.is_(False)),
    )


def _covered_by_named(s: Session, entry: DeletionEntry) -> bool:
    """Whether a later finished run that named ids covers ``entry`` (itself named: a run naming ids
    covers only one naming them all). Rare, so :meth:`DeletionEntry.covers` decides in Python."""
    stmt = select(DeletionRow).where(
        DeletionRow.finished_at.is_not(None),
        DeletionRow.started_at > entry.started_at,
        DeletionRow.named >= entry.named,
    )
    rows = s.scalars(stmt.order_by(DeletionRow.started_at).execution_options(yield_per=_PAGE))
    try:
        return any(_entry(row).covers(entry) for row in rows)
    finally:
        rows.close()  # the first covering run ends the read: its cursor is not left for the collector


def _entry(row: DeletionRow) -> DeletionEntry:
    return DeletionEntry(
        id=row.id,
        started_at=row.started_at,
        progressed_at=row.progressed_at,
        finished_at=row.finished_at,
        actor=row.actor,
        client=row.client,
        named=row.named,
        episode_ids=tuple(row.episode_ids or ()),
        user_id=row.user_id,
        created_before=row.created_before,
        include_unlearned=row.include_unlearned,
        kept=row.kept,
        deleted=row.deleted,
        memories_forgotten=row.memories_forgotten,
        threads_deleted=row.threads_deleted,
    )
