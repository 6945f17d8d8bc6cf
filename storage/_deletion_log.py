"""The audit trail of episode deletions.

A deleted episode leaves no row behind, so each run of :func:`~memabra.storage._retention.delete_episodes`
leaves one here instead: what it was asked to delete (named ids, a user, a cut-off time), who asked
and from where, how many matching episodes it kept for the learner, and how many it deleted. The
entry is written before the first chunk, its count grows in the transaction of each chunk, and it
is marked finished after the last: it never counts an episode that was not deleted, and a run that
died half way reads as unfinished with exactly what it removed. Dry runs leave no entry.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, tuple_, update
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._records import utcnow
from memabra.storage._models import DeletionRow
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = ["MAX_NAMED_KEPT", "DeletionEntry", "add_deleted", "deletion_history", "finish_deletion", "start_deletion"]

# Named ids an entry keeps: an admin deletes one at a time, a script may name thousands, and the
# count (always kept) says how many there were.
MAX_NAMED_KEPT = 100

# Named ids a one-line description shows.
_IDS_DESCRIBED = 3

# Longest actor or client text kept (the columns' width).
_MAX_TEXT = 200


@dataclass(frozen=True, slots=True)
class DeletionEntry:
    """One deletion run. ``named``: how many ids it was given (0: none), ``episode_ids`` the first
    :data:`MAX_NAMED_KEPT` of them; ``user_id`` / ``created_before``: the other filters (``None``:
    not given). ``kept``: matching episodes kept because a learner had not read their reward.
    ``finished_at`` is ``None`` while the run goes on, or for good when it died half way."""

    id: str
    started_at: datetime
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

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

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
        return f"{asked} (unlearned rewards too)" if self.include_unlearned else asked


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
) -> str:
    """Write the entry of a run about to delete; returns its id."""
    actor = clean_text(actor).strip()
    entry_id = uuid.uuid4().hex
    row = DeletionRow(
        id=entry_id,
        started_at=utcnow(),
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
    )

    def work(s: Session) -> None:
        s.add(row)

    tx.write(work, what="start_deletion")
    return entry_id


def add_deleted(s: Session, entry_id: str, n: int) -> None:
    """Count ``n`` more deleted episodes, in the caller's transaction (the one that deleted them)."""
    s.execute(update(DeletionRow).where(DeletionRow.id == entry_id).values(deleted=DeletionRow.deleted + n))


def finish_deletion(tx: Transactions, entry_id: str) -> None:
    def work(s: Session) -> None:
        s.execute(update(DeletionRow).where(DeletionRow.id == entry_id).values(finished_at=utcnow()))

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


def _entry(row: DeletionRow) -> DeletionEntry:
    return DeletionEntry(
        id=row.id,
        started_at=row.started_at,
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
    )
