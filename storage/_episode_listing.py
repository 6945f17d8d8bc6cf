"""The episode listing: newest first, keyset-paginated on (created_at, id), so a page costs the
same at any depth.

An episode's kinds are the kinds its decisions *chose* (a slot drew a candidate of the kind; a
stop draw chooses nothing), read from the slot draws: the denormalised ``episodes.kinds`` column
holds the kinds it was *offered*, and a router offered memories, skills and tools on every turn,
so a filter on it matched every episode and every row read ``memory skill tool``.

A page also says where the page before it starts (one short read upwards from its cursor) and,
when asked, how many episodes match: one ``COUNT`` under the same filters that stops at
:data:`COUNT_CAP`, so that it stays cheap on a log of millions of episodes.
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ARRAY, String, any_, bindparam, exists, false, func, or_, select
from sqlalchemy import column as column_
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._records import STOP_ID, CandidateKind, EpisodeSummary, Page
from memabra.storage import _convert as cv
from memabra.storage._episodes import EpisodeFilter
from memabra.storage._failures import failed_condition, failure_causes
from memabra.storage._models import DecisionRow, DecisionSlotRow, EpisodeRow, PolicySnapshotRow
from memabra.storage._policy_versions import SnapshotIndex, _updates
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = ["COUNT_CAP", "chosen_kinds", "iter_episodes", "list_episodes", "list_lowest_rewards", "summaries"]

# versions per IN (...) list, under SQLite's limit on bound parameters
_IN_CHUNK = 900
# SQLite: up to this many versions a snapshot served, its episodes are found through the version index
_LOOKED_UP = 64

COUNT_CAP = 10_000
"""A count stops here (``Page.total_capped``): counting every row of a large log on each page view
would cost more than the page."""


def list_episodes(
    tx: Transactions,
    filters: EpisodeFilter | None,
    cursor: str | None,
    limit: int,
    *,
    count: bool = False,
    also: Sequence[Any] = (),
) -> Page:
    """One page of episode summaries, newest first, after ``cursor``; with ``count``, how many
    episodes match (up to :data:`COUNT_CAP`). ``also``: more conditions on :class:`EpisodeRow`
    (a filter of the admin view's own, :mod:`~memabra.storage._admin_mempo`'s)."""
    if limit < 1 or limit > 1000:
        raise InvalidRecordError(f"limit must be between 1 and 1000, got {limit}")
    at_cursor = _decode_cursor(cursor) if cursor is not None else None
    with tx.read() as s:
        conds = [*_matching(s, filters), *also]
        rows = _page(s, conds, at_cursor, limit)
        more = len(rows) > limit
        items = summaries(s, rows[:limit])
        previous = _previous_cursor(s, conds, at_cursor, limit) if at_cursor is not None else None
        # a first page holding every match is its own count: no second pass over the log (a rare
        # --search term read every row twice, once for the page and once to count it)
        whole = at_cursor is None and not more
        total = (len(items) if whole else _count(s, conds)) if count else None
    rows = rows[:limit]
    return Page(
        items=items,
        next_cursor=_encode_cursor(rows[-1].created_at, rows[-1].id) if more and rows else None,
        has_previous=at_cursor is not None,
        previous_cursor=previous,
        total=None if total is None else min(total, COUNT_CAP),
        total_capped=total is not None and total > COUNT_CAP,
    )


def iter_episodes(tx: Transactions, filters: EpisodeFilter | None, *, batch: int = 1000) -> Iterator[EpisodeSummary]:
    """Every episode matching ``filters``, newest first, as :func:`list_episodes` pages them but
    streamed: ``batch`` rows per short read (the filters are resolved once, in the first), so a
    script can take a log of millions without it being held, or a transaction held open, at once."""
    if batch < 1:
        raise InvalidRecordError(f"batch must be at least 1, got {batch}")
    at_cursor: tuple[datetime, str] | None = None
    conds: list[Any] | None = None
    while True:
        with tx.read() as s:
            if conds is None:
                conds = _matching(s, filters)
            rows = _page(s, conds, at_cursor, batch - 1)
            items = summaries(s, rows)
        yield from items
        if len(rows) < batch:
            return
        at_cursor = (rows[-1].created_at, rows[-1].id)


def list_lowest_rewards(
    s: Session, filters: EpisodeFilter | None, offset: int, limit: int, *, also: Sequence[Any] = ()
) -> Page:
    """One page of the rewarded episodes matching ``filters``, lowest reward first (ties by id),
    ``offset`` rows in (at most :data:`COUNT_CAP`): the worst turns of a window. The cursors are
    offsets; ``total`` counts the rewarded episodes that match. The filters are those of
    :func:`list_episodes`, so this page holds what the newest-first one does, reordered."""
    if not 0 <= offset <= COUNT_CAP or not 1 <= limit <= 1000:
        raise InvalidRecordError(f"a page of the lowest rewards starts within the first {COUNT_CAP:,} episodes")
    e = EpisodeRow
    conds = [*_matching(s, filters), *also, e.reward_total.is_not(None)]
    stmt = select(e).where(*conds).order_by(e.reward_total.asc(), e.id.asc())
    rows = s.scalars(stmt.offset(offset).limit(limit + 1)).all()
    items = summaries(s, rows[:limit])
    total = _count(s, conds)
    more = len(rows) > limit and offset + limit <= COUNT_CAP
    return Page(
        items=items,
        next_cursor=str(offset + limit) if more else None,
        has_previous=offset > 0,
        previous_cursor=str(offset - limit) if offset - limit > 0 else None,
        total=min(total, COUNT_CAP),
        total_capped=total > COUNT_CAP,
    )


def _matching(s: Session, filters: EpisodeFilter | None) -> list[Any]:
    """The WHERE conditions of ``filters``."""
    flt = filters or EpisodeFilter()
    conds = _conditions(flt)
    if flt.snapshot is not None:
        conds.append(_served_by(s, clean_text(flt.snapshot), list(conds)))
    return conds


def _conditions(f: EpisodeFilter) -> list[Any]:
    e = EpisodeRow
    conds: list[Any] = []
    if f.user_id is not None:
        conds.append(e.user_id == clean_text(f.user_id))
    if f.thread_id is not None:
        conds.append(e.thread_id == clean_text(f.thread_id))
    if f.since is not None:
        conds.append(e.created_at >= f.since)
    if f.until is not None:
        conds.append(e.created_at < f.until)
    if f.policy_version is not None:
        conds.append(e.policy_version == clean_text(f.policy_version))
    if f.kind is not None:
        conds.append(_chose(CandidateKind(f.kind)))
    if f.reward_min is not None:
        conds.append(e.reward_total >= f.reward_min)
    if f.reward_max is not None:
        conds.append(e.reward_total <= f.reward_max)
    if f.corrected is not None:
        conds.append(e.corrected.is_(f.corrected))
    if f.query_contains is not None:
        if not f.query_contains.strip():
            raise InvalidRecordError("query_contains must not be blank (leave it out to keep every query)")
        conds.append(e.query.icontains(clean_text(f.query_contains), autoescape=True))
    failed = failed_condition(f.failed, f.failure_cause)
    if failed is not None:
        conds.append(failed)
    return conds


def _served_by(s: Session, snapshot: str, conds: Sequence[Any] = ()) -> Any:
    """Whether the episode's policy version grew from ``snapshot`` (or is it). The versions are
    grouped in Python by the one rule every view uses, over the distinct versions of the episodes
    the other filters keep whose version could have grown from it (``snapshot`` itself or, past its
    root, ``<root>+...``: every version the rule attributes to it starts so); the log holds one
    version per online update, so the list goes to the database as one parameter where it can
    (PostgreSQL's arrays, SQLite's ``json_each``), not as tens of thousands of bound values."""
    if s.get(PolicySnapshotRow, snapshot) is None:
        raise InvalidRecordError(f"snapshot: no policy snapshot with version {snapshot!r}")
    column = EpisodeRow.policy_version
    grown = _updates(snapshot)
    prefix = grown[0] if grown is not None else snapshot
    candidates = or_(column == snapshot, column.startswith(prefix + "+", autoescape=True))
    versions = s.scalars(select(column).where(*conds, candidates).distinct())
    index = SnapshotIndex(s.scalars(select(PolicySnapshotRow.version)).all())
    served = sorted(v for v in versions if v is not None and index.group(v) == snapshot)
    if not served:
        return false()
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        return column == any_(bindparam("served_versions", served, type_=ARRAY(String())))
    if dialect == "sqlite":
        listed = select(column_("value", String())).select_from(func.json_each(json.dumps(served)))
        # SQLite looks each version up in its index and sorts every episode they served before a
        # page of them; past a few versions, walking the newest-first index and testing each row
        # stops after the page (``|| ''`` keeps the version index out of the plan)
        tested = column if len(served) <= _LOOKED_UP else column.concat("")
        return tested.in_(listed.scalar_subquery())
    return or_(*(column.in_(served[i : i + _IN_CHUNK]) for i in range(0, len(served), _IN_CHUNK)))


def _chose(kind: CandidateKind) -> Any:
    """Whether one of the episode's slot draws drew a candidate of ``kind``."""
    d, slot = DecisionRow, DecisionSlotRow
    return exists().where(
        d.episode_id == EpisodeRow.id,
        slot.decision_id == d.id,
        slot.kind == kind.value,
        slot.chosen_id != STOP_ID,
    )


def _page(s: Session, conds: list[Any], at_cursor: tuple[datetime, str] | None, limit: int) -> Sequence[EpisodeRow]:
    """``limit + 1`` rows older than the cursor (the extra one says whether a next page exists)."""
    e = EpisodeRow
    where = list(conds)
    if at_cursor is not None:
        at, last_id = at_cursor
        # two conditions rather than one OR: the first is a plain index range, so a deep page
        # seeks straight to the cursor instead of scanning every newer row
        where += [e.created_at <= at, or_(e.created_at < at, e.id < last_id)]
    stmt = select(e).where(*where).order_by(e.created_at.desc(), e.id.desc()).limit(limit + 1)
    return s.scalars(stmt).all()


def _previous_cursor(s: Session, conds: list[Any], at_cursor: tuple[datetime, str], limit: int) -> str | None:
    """The cursor of the page before the one that starts after ``at_cursor``.

    A cursor is the last row of the page before it, so that page is the cursor's row and the
    ``limit - 1`` rows above it; its own cursor is the row above those, the ``limit``-th row
    newer than the cursor. ``None`` when there is none: the previous page is the first."""
    e = EpisodeRow
    at, last_id = at_cursor
    stmt = (
        select(e.created_at, e.id)
        .where(*conds, e.created_at >= at, or_(e.created_at > at, e.id > last_id))
        .order_by(e.created_at.asc(), e.id.asc())
        .offset(limit - 1)
        .limit(1)
    )
    row = s.execute(stmt).first()
    return None if row is None else _encode_cursor(row[0], row[1])


def _count(s: Session, conds: list[Any]) -> int:
    """How many episodes match, counting at most ``COUNT_CAP + 1``."""
    matching = select(EpisodeRow.id).where(*conds).limit(COUNT_CAP + 1).subquery()
    return int(s.scalar(select(func.count()).select_from(matching)) or 0)


def summaries(s: Session, rows: Sequence[EpisodeRow]) -> tuple[EpisodeSummary, ...]:
    """The listing rows of ``rows``: each with the kinds it chose and, where it failed, why."""
    ids = [r.id for r in rows]
    chosen = chosen_kinds(s, ids)
    failed = failure_causes(s, ids)
    return tuple(
        cv.summary_from_row(r, kinds=chosen.get(r.id, ()), failed=r.id in failed, failure_cause=failed.get(r.id))
        for r in rows
    )


def chosen_kinds(s: Session, episode_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The kinds each episode's slot draws chose, in the kinds' own order."""
    if not episode_ids:
        return {}
    d, slot = DecisionRow, DecisionSlotRow
    stmt = (
        select(d.episode_id, slot.kind)
        .join(slot, slot.decision_id == d.id)
        .where(d.episode_id.in_(episode_ids), slot.chosen_id != STOP_ID)
        .distinct()
    )
    found: dict[str, set[str]] = defaultdict(set)
    for episode_id, kind in s.execute(stmt):
        found[episode_id].add(kind)
    order = [k.value for k in CandidateKind]
    return {episode_id: tuple(k for k in order if k in kinds) for episode_id, kinds in found.items()}


def _encode_cursor(at: datetime, episode_id: str) -> str:
    raw = json.dumps([at.isoformat(), episode_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, episode_id = json.loads(base64.urlsafe_b64decode(padded))
        when = datetime.fromisoformat(at)
        # every cursor this module writes carries its offset: a naive time was made by hand, and
        # the log's time columns would refuse it only once the query ran
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when.astimezone(UTC), clean_text(str(episode_id))
    except Exception:
        raise InvalidRecordError(f"cursor is not a page cursor of this listing: {cursor!r}") from None
