"""The admin view's list of kept turns (``/turns``): the oldest first, keyset-paged on
(suspended_at, turn_id), as the episode list is on (created_at, id).

After an outage the log may keep tens of thousands of paused and running turns, and turns are
kept and logged (resumed, abandoned) while someone pages through them. A page starts after the
last row of the page before, wherever that row now stands, so a turn kept or logged meanwhile
neither repeats nor skips a row, and a page reads the same few rows at any depth.

A cursor has the episode list's form: URL-safe base64 of the JSON ``[ISO time, id]`` of the last
row of the page before it.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra.storage._admin_records import TurnPage
from memabra.storage._models import SuspendedTurnRow
from memabra.storage._rows import clean_text
from memabra.storage._suspended_turns import SuspendedTurn, lost_by

__all__ = ["MAX_TURN_PAGE", "decode_turn_cursor", "kept_turns_page"]

MAX_TURN_PAGE = 500
"""The most turns one page reads."""


def kept_turns_page(s: Session, cursor: str | None, limit: int, lost_at: datetime | None = None) -> TurnPage:
    """The kept turns after ``cursor`` (``None``: from the oldest), ``limit`` of them; with
    ``lost_at``, only the running ones lost by then (as ``memabra episodes paused --lost``)."""
    if not 1 <= limit <= MAX_TURN_PAGE:
        raise InvalidRecordError(f"limit must be between 1 and {MAX_TURN_PAGE}, got {limit}")
    if lost_at is not None and lost_at.tzinfo is None:
        raise InvalidRecordError(f"lost_at must be timezone-aware, got the naive datetime {lost_at.isoformat()}")
    at_cursor = decode_turn_cursor(cursor) if cursor is not None else None
    t = SuspendedTurnRow
    conds: list[Any] = [] if lost_at is None else lost_by(lost_at)
    where = list(conds)
    if at_cursor is not None:
        at, last_id = at_cursor
        # two conditions rather than one OR: the first is a plain range of the suspended_at index,
        # so a deep page seeks to the cursor instead of reading every turn before it
        where += [t.suspended_at >= at, or_(t.suspended_at > at, t.turn_id > last_id)]
    stmt = select(t).where(*where).order_by(t.suspended_at, t.turn_id).limit(limit + 1)
    rows = list(s.scalars(stmt))
    more = len(rows) > limit
    rows = rows[:limit]
    previous: str | None = None
    position = 0
    if at_cursor is not None:
        at, last_id = at_cursor
        up_to = [*conds, t.suspended_at <= at, or_(t.suspended_at < at, t.turn_id <= last_id)]
        # where the page stands: the turns up to its cursor (a kept-turns table is small next to
        # the episodes, and the page's header counts all of it on every view anyway)
        position = int(s.scalar(select(func.count()).select_from(t).where(*up_to)) or 0)
        # the page before is the cursor's row and the limit - 1 before it; its own cursor is the
        # row before those (none: the page before is the first)
        back = (
            select(t.suspended_at, t.turn_id)
            .where(*up_to)
            .order_by(t.suspended_at.desc(), t.turn_id.desc())
            .offset(limit)
            .limit(1)
        )
        row = s.execute(back).first()
        previous = None if row is None else encode_turn_cursor(row[0], row[1])
    return TurnPage(
        items=tuple(_record(r) for r in rows),
        position=position,
        next_cursor=encode_turn_cursor(rows[-1].suspended_at, rows[-1].turn_id) if more and rows else None,
        has_previous=at_cursor is not None,
        previous_cursor=previous,
    )


def encode_turn_cursor(at: datetime, turn_id: str) -> str:
    raw = json.dumps([at.astimezone(UTC).isoformat(), turn_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_turn_cursor(cursor: str) -> tuple[datetime, str]:
    """The (suspended_at, turn_id) a cursor names; :class:`InvalidRecordError` naming it when it
    is not one this listing wrote."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, turn_id = json.loads(base64.urlsafe_b64decode(padded))
        if not isinstance(at, str) or not isinstance(turn_id, str):
            raise ValueError("not [time, id]")
        when = datetime.fromisoformat(at)
        # every cursor written here carries its offset: a naive time was made by hand, and the
        # log's time columns would refuse it only once the query ran
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when.astimezone(UTC), clean_text(turn_id)
    except Exception:
        raise InvalidRecordError(f"cursor is not a page cursor of the unfinished turns: {cursor!r}") from None


def _record(row: SuspendedTurnRow) -> SuspendedTurn:
    return SuspendedTurn(
        row.turn_id, row.episode_id, row.user_id, row.thread_id, row.suspended_at, row.document, row.paused
    )
