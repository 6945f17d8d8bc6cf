"""One user's memories a page at a time, newest first, keyset-paginated on ``(created_at, id)``:
what ``memabra memories list`` shows. A page reads its ``limit`` rows (and one more, to say whether
another page follows) through ``ix_registry_owner_kind_created_at`` (revision 0022), never the
user's whole set; :func:`iter_memory_records` streams every one, one short read per batch; a count
stops at :data:`MEMORY_COUNT_CAP`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, or_, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._memory_records import MemoryRecord
from memabra._records import CandidateKind
from memabra.storage._memory_rows import memory_record
from memabra.storage._models import RegistryRow
from memabra.storage._rows import clean_text

__all__ = ["MEMORY_COUNT_CAP", "MemoryRecordPage", "count_memory_records", "iter_memory_records", "memory_record_page"]

MEMORY_COUNT_CAP = 100_000
"""A count of one user's memories stops here (``capped``): past it, the number is "more than"."""

_MEMORY = CandidateKind.MEMORY.value


@dataclass(frozen=True, slots=True)
class MemoryRecordPage:
    """A page of one user's memories, newest first; ``next_cursor`` starts the next (older) one."""

    items: tuple[MemoryRecord, ...]
    next_cursor: str | None


def _conditions(user_id: str, include_retired: bool) -> list[Any]:
    if not user_id:
        raise InvalidRecordError("user: memories are listed per user; give a user id")
    r = RegistryRow
    conds: list[Any] = [r.kind == _MEMORY, r.owner == clean_text(user_id), r.deleted_at.is_(None)]
    if not include_retired:
        conds.append(r.retired_at.is_(None))
    return conds


def memory_record_page(
    engine: Engine, user_id: str, *, include_retired: bool = True, cursor: str | None = None, limit: int = 100
) -> MemoryRecordPage:
    """``limit`` of the user's memories older than ``cursor`` (the newest when ``None``)."""
    if limit < 1:
        raise InvalidRecordError(f"limit must be at least 1, got {limit}")
    after = _decode(cursor) if cursor is not None else None
    rows = _read(engine, _conditions(user_id, include_retired), after, limit + 1)
    page = rows[:limit]
    more = len(rows) > limit
    return MemoryRecordPage(
        tuple(memory_record(row) for row in page), _encode(page[-1].created_at, page[-1].id) if more else None
    )


def iter_memory_records(
    engine: Engine, user_id: str, *, include_retired: bool = True, batch: int = 1000
) -> Iterator[MemoryRecord]:
    """Every memory of the user, newest first, read ``batch`` rows at a time (each its own short
    read: no transaction stays open while the caller writes them out)."""
    conds = _conditions(user_id, include_retired)
    after: tuple[datetime, str] | None = None
    while True:
        rows = _read(engine, conds, after, batch)
        for row in rows:
            yield memory_record(row)
        if len(rows) < batch:
            return
        after = (rows[-1].created_at, rows[-1].id)


def count_memory_records(engine: Engine, user_id: str, *, include_retired: bool = True) -> tuple[int, bool]:
    """How many memories the user has, counting at most :data:`MEMORY_COUNT_CAP`; and whether
    there are more than that."""
    matching = select(RegistryRow.id).where(*_conditions(user_id, include_retired)).limit(MEMORY_COUNT_CAP + 1)
    with engine.connect() as conn:
        n = int(conn.execute(select(func.count()).select_from(matching.subquery())).scalar() or 0)
    return min(n, MEMORY_COUNT_CAP), n > MEMORY_COUNT_CAP


def _read(engine: Engine, conds: list[Any], after: tuple[datetime, str] | None, limit: int) -> list[RegistryRow]:
    r = RegistryRow
    where = list(conds)
    if after is not None:
        at, last_id = after
        # a plain range first: the index seeks to the cursor rather than walking the newer rows
        where += [r.created_at <= at, or_(r.created_at < at, r.id < last_id)]
    stmt = select(r).where(*where).order_by(r.created_at.desc(), r.id.desc()).limit(limit)
    with Session(engine, expire_on_commit=False) as s, s.begin():
        return list(s.scalars(stmt))


def _encode(at: datetime, memory_id: str) -> str:
    raw = json.dumps([at.isoformat(), memory_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[datetime, str]:
    try:
        at, memory_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when.astimezone(UTC), str(memory_id)
    except Exception:
        raise InvalidRecordError(f"cursor is not a page cursor of this memory listing: {cursor!r}") from None
