"""Which saved snapshot a logged policy version grew from, and free names for new snapshots.

Online learning names each model ``<root>+<n>``, ``n`` the updates since ``root``: a router
restored from snapshot ``V`` logs ``V+1``, ``V+2``, ...; an online learner keeps its lineage's root
and counts every update in it, so it logs ``root+150`` after saving snapshot ``root+100`` and
before saving ``root+170``. Only some of those models are saved, so a decision's version is mostly
not a snapshot's. :func:`snapshot_group` is the one rule every view uses to attribute it: the
latest snapshot of its root whose update count is at most its own (the model it grew from).
"""

from __future__ import annotations

import re
import weakref
from bisect import bisect_right
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, or_, select, text
from sqlalchemy.orm import Session

from memabra.storage._models import DecisionRow, PolicySnapshotRow
from memabra.storage._rows import clean_text

if TYPE_CHECKING:
    from memabra.storage._log import EpisodeLog

__all__ = ["SnapshotIndex", "snapshot_group", "snapshot_index_for", "unused_snapshot_version"]

# "<root>+<n>": the version of a model ``n`` online updates past the snapshot or configuration ``root``
_UPDATES = re.compile(r"(?P<root>.+)\+(?P<n>[0-9]+)")


def _updates(version: str) -> tuple[str, int] | None:
    match = _UPDATES.fullmatch(version)
    return (match["root"], int(match["n"])) if match else None


class SnapshotIndex:
    """:func:`snapshot_group` for many versions against one set of snapshots (built once)."""

    def __init__(self, snapshot_versions: Collection[str]) -> None:
        self._versions = frozenset(snapshot_versions)
        named: dict[str, dict[int, str]] = {}
        for version in sorted(self._versions):
            parsed = _updates(version)
            if parsed is not None:
                # sorted, so two spellings of one count ("+7", "+07") always resolve to the same one
                named.setdefault(parsed[0], {}).setdefault(parsed[1], version)
        self._named = named
        self._counts = {root: sorted(by_count) for root, by_count in named.items()}

    def group(self, policy_version: str) -> str:
        """The snapshot ``policy_version`` grew from, or, when it grew from none, its
        configuration (the text before the first ``+``, not a snapshot)."""
        current = policy_version
        while current not in self._versions:
            parsed = _updates(current)
            if parsed is None:
                return policy_version.split("+", 1)[0]
            root, n = parsed
            counts = self._counts.get(root, [])
            at = bisect_right(counts, n)
            if at:
                return self._named[root][counts[at - 1]]
            # no snapshot of this root at or below n: the root itself, or what it grew from
            current = root
        return current

    def snapshot_of(self, policy_version: str) -> str | None:
        """The snapshot ``policy_version`` grew from (itself when it is one), ``None`` when none."""
        group = self.group(policy_version)
        return group if group in self._versions else None


def snapshot_group(policy_version: str, snapshot_versions: Collection[str]) -> str:
    """The saved snapshot a logged ``policy_version`` grew from: itself when it is a snapshot,
    else the latest snapshot of its root (``<root>+<n>``) whose update count is at most its own,
    following roots that are themselves updates (``V+3`` of snapshot ``V``). With no such
    snapshot: its configuration, the text before the first ``+`` (not a snapshot; test with
    ``in snapshot_versions``). A person promotes, rolls back or counts decisions against that
    snapshot, not each online update."""
    return SnapshotIndex(snapshot_versions).group(policy_version)


def snapshot_index_for(session: Session, policy_versions: Iterable[str]) -> SnapshotIndex:
    """A :class:`SnapshotIndex` that answers exactly as one over every snapshot would, for
    ``policy_versions`` (``group`` and ``snapshot_of``), built from the few snapshots those answers
    read rather than from every snapshot in the log (tens of thousands before a prune)."""
    versions = {str(version) for version in policy_versions}
    if session.get_bind().dialect.name not in ("sqlite", "postgresql"):
        return SnapshotIndex(session.scalars(select(PolicySnapshotRow.version)).all())
    exact: set[str] = set()
    counts_of: dict[str, set[int]] = {}
    for version in versions:
        # what group() reads for it: whether each model on its way back to a configuration is a
        # snapshot, and each root's snapshots at or below the count it climbs from; and its
        # configuration, which snapshot_of() names when a snapshot has that name
        exact.add(version.split("+", 1)[0])
        current: str | None = version
        while current is not None:
            exact.add(current)
            parsed = _updates(current)
            if parsed is not None:
                counts_of.setdefault(parsed[0], set()).add(parsed[1])
            current = parsed[0] if parsed is not None else None
    if not versions:
        return SnapshotIndex(())
    column = _ordered_column(session)
    found = _exact(session, sorted(exact))
    for root, counts in counts_of.items():
        found.update(_needed_updates(session, column, root, min(counts), max(counts)))
    return SnapshotIndex(found)


def unused_snapshot_version(log: EpisodeLog, version: str) -> str:
    """``version`` when nothing in the log could be attributed to it, else the first of
    ``version~2``, ``version~3``, ... that no snapshot and no logged decision uses: the name for a
    model trained apart from the lineage whose decisions carry ``version`` (an offline training
    run restarting from the same configuration reaches the same ``root+n``), so the log never
    attributes one model's decisions to another.

    A ``root+n`` name is free only when the log holds no model of ``root``'s lineage at all:
    :func:`snapshot_group` credits a snapshot with every later update of its root up to the next
    snapshot, so an unused ``root+446`` beside an online lineage that logged ``root+447`` ... would
    be credited with the lineage's decisions (and, at a count the lineage has not reached yet,
    with those it logs later). The ``~`` suffix takes the name out of the lineage."""
    wanted = clean_text(version)
    with log.transactions.read() as s:
        taken = set(s.scalars(select(PolicySnapshotRow.version).where(PolicySnapshotRow.version.like(f"{wanted}%"))))
        taken.update(
            s.scalars(
                select(DecisionRow.policy_version).where(DecisionRow.policy_version.like(f"{wanted}%")).distinct()
            )
        )
        parsed = _updates(wanted)
        if parsed is not None and _lineage_exists(s, parsed[0]):
            taken.add(wanted)
    candidate, n = wanted, 1
    while candidate in taken:
        n += 1
        candidate = f"{wanted}~{n}"
    return candidate


def _lineage_exists(session: Session, root: str) -> bool:
    """Whether a snapshot or a logged decision is ``root`` or an online update of it."""
    updates = _escape_like(root) + "+%"
    for column in (PolicySnapshotRow.version, DecisionRow.policy_version):
        found = session.scalars(
            select(column).where(or_(column == root, column.like(updates, escape="\\"))).limit(1)
        ).first()
        if found is not None:
            return True
    return False


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# Reading a root's snapshots by range needs the version column to order like Python's str (code
# points, which is UTF-8's byte order): SQLite's BINARY does; on PostgreSQL the database's collation
# decides, so a C-like one lets the primary key serve the ranges, and any other is overridden with
# COLLATE "C" (right everywhere; the index, built in the column's collation, cannot serve it then)
_BYTE_ORDER_LOCALES = frozenset({"c", "posix", "c.utf8", "c.utf-8"})
_BYTE_ORDERED: weakref.WeakKeyDictionary[Engine, bool] = weakref.WeakKeyDictionary()
_PG_COLLATION = text(
    "SELECT c.collname, c.collprovider, c.collcollate, to_jsonb(d) "
    "FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation "
    "JOIN pg_database d ON d.datname = current_database() "
    "WHERE a.attrelid = to_regclass('policy_snapshots') AND a.attname = 'version'"
)
# rows per read while looking for a root's latest snapshot below a count (a few are other names)
_SCAN_BATCH = 64
_IN_CHUNK = 500


def _ordered_column(session: Session) -> Any:
    """The version column, in an ordering the same as Python's ``str`` comparison."""
    engine = session.get_bind().engine
    if engine.dialect.name == "sqlite":
        return PolicySnapshotRow.version
    if engine not in _BYTE_ORDERED:
        _BYTE_ORDERED[engine] = _pg_byte_ordered(session)
    return PolicySnapshotRow.version if _BYTE_ORDERED[engine] else PolicySnapshotRow.version.collate("C")


def _pg_byte_ordered(session: Session) -> bool:
    found = session.execute(_PG_COLLATION).first()
    if found is None:
        return False
    name, provider, locale, database = found
    if name != "default":
        return name in ("C", "POSIX", "ucs_basic") or (provider == "c" and str(locale).lower() in _BYTE_ORDER_LOCALES)
    # datlocprovider from PostgreSQL 15 ("c" libc, "i" ICU, "b" builtin from 17), libc before it
    provider = database.get("datlocprovider", "c")
    locale = database.get("datlocale") if provider == "b" else database.get("datcollate")
    return provider in ("c", "b") and str(locale).lower() in _BYTE_ORDER_LOCALES


def _exact(session: Session, versions: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(versions), _IN_CHUNK):
        chunk = versions[i : i + _IN_CHUNK]
        found.update(session.scalars(select(PolicySnapshotRow.version).where(PolicySnapshotRow.version.in_(chunk))))
    return found


def _needed_updates(session: Session, column: Any, root: str, lowest: int, highest: int) -> set[str]:
    """Snapshots of ``root`` (``root+<digits>``) that include every spelling of the latest one
    at or below each count from ``lowest`` to ``highest``: the spellings with a leading zero (any
    count; rarely any), the plain ones counted above ``lowest`` up to ``highest``, and the latest
    plain one at or below ``lowest``. Plain spellings order by count only within one length, so
    each length is its own range (and the length test skips longer ones sorted between)."""
    head = root + "+"
    found = set(session.scalars(select(PolicySnapshotRow.version).where(column >= head + "0", column < head + "1")))
    for length in range(len(str(lowest)), len(str(highest)) + 1):
        low, high = max(10 ** (length - 1), lowest + 1), min(10**length - 1, highest)
        if low <= high:
            found.update(_plain(session, column, head, length, str(low), str(high)))
    for length in range(len(str(lowest)), 0, -1) if lowest > 0 else ():
        top = str(lowest) if length == len(str(lowest)) else "9" * length
        latest = _latest_plain(session, column, head, length, "1" + "0" * (length - 1), top)
        if latest is not None:
            found.add(latest)
            break
    return found


def _plain_range(column: Any, head: str, length: int, low: str, high: str) -> list[Any]:
    return [column >= head + low, column <= head + high, func.length(PolicySnapshotRow.version) == len(head) + length]


def _is_plain(version: str, head: str) -> bool:
    count = version[len(head) :]
    return version.startswith(head) and count.isascii() and count.isdigit()


def _plain(session: Session, column: Any, head: str, length: int, low: str, high: str) -> list[str]:
    found = session.scalars(select(PolicySnapshotRow.version).where(*_plain_range(column, head, length, low, high)))
    return [version for version in found if _is_plain(version, head)]


def _latest_plain(session: Session, column: Any, head: str, length: int, low: str, high: str) -> str | None:
    """The greatest ``head<digits>`` snapshot from ``head+low`` to ``head+high`` (``length``
    digits, so the greatest count), read backwards along the index past other names."""
    where = _plain_range(column, head, length, low, high)
    while True:
        batch = session.scalars(
            select(PolicySnapshotRow.version).where(*where).order_by(column.desc()).limit(_SCAN_BATCH)
        ).all()
        for version in batch:
            if _is_plain(version, head):
                return version
        if len(batch) < _SCAN_BATCH:
            return None
        where = [*where[:1], column < batch[-1], *where[2:]]
