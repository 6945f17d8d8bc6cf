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
from bisect import bisect_right
from collections.abc import Collection
from typing import TYPE_CHECKING

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from memabra.storage._models import DecisionRow, PolicySnapshotRow
from memabra.storage._rows import clean_text

if TYPE_CHECKING:
    from memabra.storage._log import EpisodeLog

__all__ = ["SnapshotIndex", "snapshot_group", "unused_snapshot_version"]

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
