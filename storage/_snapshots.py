"""Policy snapshots: saved model bytes, promote (make active), roll back (re-activate what the
promote replaced) and prune (retention).

At most one snapshot per policy is ``active``, held by a unique partial index (revision 0011):
:func:`activate` makes a stored snapshot active: it retires the active one first in the same
transaction and records it in the new one's ``previous_active``, which :func:`rollback_target`
re-activates (the parent for rows activated before that revision). The learner's commit inserts its
snapshot active after the same retire (:mod:`~memabra.storage._learner_commit`), without loading
a stored row's model bytes.

:func:`prune_snapshots` deletes old snapshots in one transaction; a decision keeps its
``policy_version`` string, so what a pruned snapshot served stays in the log and OPE on the
logged propensities is unaffected; only its model bytes are gone.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError, SnapshotError, UnknownSnapshotError
from memabra._records import PolicySnapshot
from memabra.storage import _convert as cv
from memabra.storage._learner_models import LearnerStateRow
from memabra.storage._models import DecisionRow, OPERunRow, PolicySnapshotRow, table_of
from memabra.storage._policy_versions import SnapshotIndex
from memabra.storage._rows import clean_text, prepare
from memabra.storage._tx import Transactions

__all__ = [
    "SNAPSHOT_STATUSES",
    "PruneResult",
    "SnapshotExistsError",
    "activate",
    "add_snapshot",
    "get_snapshot",
    "latest_snapshot",
    "list_snapshots",
    "prune_snapshots",
    "rollback",
    "rollback_target",
    "rollback_version",
    "save_snapshot",
    "set_snapshot_status",
    "snapshot_row_values",
    "update_snapshot_metrics",
]

SNAPSHOT_STATUSES = ("candidate", "active", "retired")


class SnapshotExistsError(InvalidRecordError):
    """The log holds a snapshot of that version already (another process saved one since the name
    was chosen)."""


def save_snapshot(tx: Transactions, snapshot: PolicySnapshot) -> None:
    values = snapshot_row_values(snapshot)
    tx.write(lambda s: add_snapshot(s, snapshot, values), what="save_snapshot")


def snapshot_row_values(snapshot: PolicySnapshot) -> dict[str, Any]:
    """The row of ``snapshot``, checked against the table before any transaction begins."""
    return prepare(table_of(PolicySnapshotRow), [cv.snapshot_values(snapshot)])[0]


def add_snapshot(s: Session, snapshot: PolicySnapshot, values: dict[str, Any]) -> None:
    """Save ``snapshot`` (its :func:`snapshot_row_values`) inside the caller's transaction; an
    active one retires the policy's active snapshot under the policy's lock."""
    if snapshot.parent is not None and s.get(PolicySnapshotRow, values["parent"]) is None:
        raise InvalidRecordError(f"snapshot parent {snapshot.parent!r} is not in the log")
    if s.get(PolicySnapshotRow, values["version"]) is not None:
        raise SnapshotExistsError(f"a snapshot with version {snapshot.version!r} already exists")
    row = PolicySnapshotRow(**{**values, "status": "candidate" if snapshot.status == "active" else snapshot.status})
    if snapshot.status == "active":
        lock_policy(s, row.policy)
    s.add(row)
    s.flush()
    if snapshot.status == "active":
        activate(s, row)


def get_snapshot(tx: Transactions, version: str) -> PolicySnapshot:
    with tx.read() as s:
        return cv.snapshot_from_row(_row(s, version))


def latest_snapshot(tx: Transactions, policy: str | None, status: str | None) -> PolicySnapshot | None:
    stmt = select(PolicySnapshotRow).order_by(PolicySnapshotRow.created_at.desc(), PolicySnapshotRow.version.desc())
    if policy is not None:
        stmt = stmt.where(PolicySnapshotRow.policy == clean_text(policy))
    if status is not None:
        stmt = stmt.where(PolicySnapshotRow.status == status)
    with tx.read() as s:
        row = s.scalars(stmt.limit(1)).first()
        return cv.snapshot_from_row(row) if row is not None else None


def list_snapshots(tx: Transactions, policy: str | None) -> list[PolicySnapshot]:
    stmt = select(PolicySnapshotRow).order_by(PolicySnapshotRow.created_at)
    if policy is not None:
        stmt = stmt.where(PolicySnapshotRow.policy == clean_text(policy))
    with tx.read() as s:
        return [cv.snapshot_from_row(r) for r in s.scalars(stmt)]


def set_snapshot_status(tx: Transactions, version: str, status: str) -> None:
    """Promote (``active``: the policy's previously active snapshot is retired) or retire."""
    if status not in SNAPSHOT_STATUSES:
        raise InvalidRecordError(f"snapshot status must be candidate, active or retired, got {status!r}")

    def work(s: Session) -> None:
        row = _policy_locked_row(s, version)
        if status == "active":
            activate(s, row)
        else:
            row.status = status

    tx.write(work, what="set_snapshot_status")


def rollback(tx: Transactions, policy: str) -> PolicySnapshot:
    """Re-activate what the policy's active snapshot replaced (:func:`rollback_target`), retiring
    the active one; returns the snapshot now active. :class:`SnapshotError` when there is nothing
    to roll back to."""

    def work(s: Session) -> PolicySnapshot:
        lock_policy(s, policy)
        active = s.scalars(
            select(PolicySnapshotRow)
            .where(PolicySnapshotRow.policy == clean_text(policy), PolicySnapshotRow.status == "active")
            .with_for_update()
        ).first()
        if active is None:
            raise SnapshotError(f"policy {policy!r} has no active snapshot to roll back")
        target = rollback_target(s, active)
        activate(s, target, record=False)
        s.refresh(target)
        return cv.snapshot_from_row(target)

    return tx.write(work, what="rollback")


def update_snapshot_metrics(tx: Transactions, version: str, metrics: Mapping[str, Any]) -> None:
    def work(s: Session) -> None:
        row = _row(s, version, lock=True)
        merged = {**(row.metrics or {}), **cv.thaw(metrics)}
        row.metrics = prepare(table_of(PolicySnapshotRow), [{"metrics": merged}])[0]["metrics"]

    tx.write(work, what="update_snapshot_metrics")


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What one retention pass kept and deleted (with ``dry_run``: would delete), oldest first."""

    kept: tuple[str, ...]
    pruned: tuple[str, ...]
    dry_run: bool


def prune_snapshots(tx: Transactions, keep: int, policy: str | None, *, dry_run: bool) -> PruneResult:
    """Delete every snapshot (of ``policy``, or of every policy) that no rule below keeps, in one
    transaction; the rows are locked first, so a concurrent promote either lands before (and the
    snapshot it activates is kept) or finds the snapshot gone.

    Kept: the newest ``keep`` per policy; the active one and its ancestors up to ``keep``
    generations (what a rollback walks); the snapshot a learner's checkpoint holds, the one it
    last published and the base it started from (a replay starts there); any snapshot an OPE
    result names."""
    if keep < 1:
        raise InvalidRecordError(f"keep must be at least 1, got {keep}")

    def work(s: Session) -> PruneResult:
        # the rules read these columns only: a model (megabytes each, thousands of snapshots on a
        # log nobody pruned yet) is never loaded, and a snapshot's metrics only for a checkpoint's
        snap = PolicySnapshotRow
        stmt = select(snap.version, snap.policy, snap.parent, snap.status, snap.previous_active).order_by(
            snap.created_at.desc(), snap.version.desc()
        )
        if policy is not None:
            stmt = stmt.where(snap.policy == clean_text(policy))
        rows = [_Weighed(*row) for row in s.execute(stmt if dry_run else stmt.with_for_update())]
        by_version = {r.version: r for r in rows}
        kept: set[str] = set()
        for state in s.scalars(select(LearnerStateRow)):
            kept.update(v for v in (state.snapshot_version, state.published) if v is not None)
            if state.snapshot_version in by_version:
                metrics = s.scalar(select(snap.metrics).where(snap.version == state.snapshot_version))
                if (base := _learner_base(metrics)) is not None:
                    kept.add(base)
        kept.update(v for v in s.scalars(select(OPERunRow.snapshot_version).distinct()) if v is not None)
        newest: dict[str, list[_Weighed]] = defaultdict(list)
        for row in rows:  # newest first
            newest[row.policy].append(row)
        for group in newest.values():
            kept.update(r.version for r in group[:keep])
            for active in (r for r in group if r.status == "active"):
                # the active snapshot and `keep` generations above it, along parents and along
                # what each replaced when it was made active (the way a rollback walks)
                generation, walked = [active], {active.version}
                for _ in range(keep + 1):
                    kept.update(r.version for r in generation)
                    up = {v for r in generation for v in (r.parent, r.previous_active) if v in by_version}
                    generation = [by_version[v] for v in sorted(up - walked)]
                    walked |= up
        oldest_first = list(reversed(rows))
        pruned = tuple(r.version for r in oldest_first if r.version not in kept)
        if pruned and not dry_run:
            for start in range(0, len(pruned), _DELETE_CHUNK):
                chunk = pruned[start : start + _DELETE_CHUNK]
                s.execute(delete(PolicySnapshotRow).where(PolicySnapshotRow.version.in_(chunk)))
                # no foreign key clears these (the parent's does): a rollback then takes the parent
                s.execute(
                    update(PolicySnapshotRow)
                    .where(PolicySnapshotRow.previous_active.in_(chunk))
                    .values(previous_active=None)
                )
        return PruneResult(tuple(r.version for r in oldest_first if r.version in kept), pruned, dry_run)

    return tx.write(work, what="prune_snapshots")


class _Weighed(NamedTuple):
    """What the prune rules read of a snapshot (never its model)."""

    version: str
    policy: str
    parent: str | None
    status: str
    previous_active: str | None


# Versions per DELETE statement: well under SQLite's limit on bound parameters.
_DELETE_CHUNK = 500


# The advisory-lock class of the per-policy lock below (ASCII "mema"), so its keys meet no other user's.
_POLICY_LOCK_CLASS = 0x6D656D61


def lock_policy(s: Session, policy: str) -> None:
    """Serialise, per policy, the transactions that change which snapshot is active (a promote, a
    rollback, a learner's commit), until ``s``'s transaction ends. Each reads the active snapshot
    and then writes; on PostgreSQL (READ COMMITTED) two of them interleaved lost one's change: a
    promote committed between a learner commit's read and its retire was retired by it, the
    operator told "promoted". SQLite already runs one writer at a time."""
    if s.get_bind().dialect.name != "postgresql":
        return
    key = zlib.crc32(clean_text(policy).encode()) - 2**31  # the int4 pg_advisory_xact_lock takes
    s.execute(text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": _POLICY_LOCK_CLASS, "k": key})


def _policy_locked_row(s: Session, version: str) -> PolicySnapshotRow:
    """``version``'s row, locked, after its policy's lock (taken first: the learner's commit takes
    the policy lock before it touches snapshot rows, so the two never wait on each other)."""
    policy = s.scalar(select(PolicySnapshotRow.policy).where(PolicySnapshotRow.version == clean_text(version)))
    if policy is not None:
        lock_policy(s, policy)
    return _row(s, version, lock=True)


def _row(s: Session, version: str, *, lock: bool = False) -> PolicySnapshotRow:
    row = s.get(PolicySnapshotRow, clean_text(version), with_for_update=lock or None)
    if row is None:
        raise UnknownSnapshotError(_no_snapshot(s, clean_text(version)))
    return row


def _no_snapshot(s: Session, version: str) -> str:
    """Why ``version`` has no snapshot. Most versions decisions carry were never saved (an online
    learner saves one model in many), so say which snapshot they grew from rather than guess."""
    served = s.scalar(select(DecisionRow.id).where(DecisionRow.policy_version == version).limit(1))
    if served is None:
        return f"no policy snapshot with version {version!r}, and no logged decision names it"
    grew_from = SnapshotIndex(s.scalars(select(PolicySnapshotRow.version)).all()).snapshot_of(version)
    if grew_from is not None:
        return (
            f"no snapshot of version {version!r}: it is an online update of snapshot {grew_from!r}, "
            "which its decisions grew from (not every update is saved)"
        )
    return (
        f"no snapshot of version {version!r}: its decisions stay in the log, but no saved snapshot "
        "holds its model or one it grew from (never saved, or removed by memabra policies prune)"
    )


def _learner_base(metrics: Mapping[str, Any] | None) -> str | None:
    """The snapshot a learner's model started from, as a snapshot's ``metrics`` record it
    (memabra._replay)."""
    meta = (metrics or {}).get("learner")
    base = meta.get("base") if isinstance(meta, dict) else None
    return str(base) if base else None


def activate(
    s: Session,
    row: PolicySnapshotRow,
    *,
    record: bool = True,
    retired: Callable[[PolicySnapshotRow], None] | None = None,
) -> str | None:
    """Make ``row`` its policy's active snapshot: retire the active one first (flushed, so the
    unique index on one active snapshot per policy never sees two), then activate ``row``. With
    ``record`` (a promote, a learner's publish; not a rollback, which would make the next rollback
    return to the snapshot it just left), ``row.previous_active`` names the snapshot it replaced.
    ``retired(other)`` is called for each snapshot retired. Returns the replaced version. The
    caller holds the policy's lock (:func:`lock_policy`)."""
    if row.status == "active":
        return None
    others = s.scalars(
        select(PolicySnapshotRow)
        .where(
            PolicySnapshotRow.policy == row.policy,
            PolicySnapshotRow.status == "active",
            PolicySnapshotRow.version != row.version,
        )
        .order_by(PolicySnapshotRow.created_at.desc(), PolicySnapshotRow.version.desc())
        .with_for_update()
    ).all()
    for other in others:
        other.status = "retired"
        if retired is not None:
            retired(other)
    s.flush()
    replaced = others[0].version if others else None
    if record:
        row.previous_active = replaced
    row.status = "active"
    s.flush()
    return replaced


def rollback_version(
    previous_active: str | None, parent: str | None, policy: str, policy_of: Callable[[str], str | None]
) -> str | None:
    """What a rollback of an active snapshot re-activates, the one rule every caller uses (the
    rollback itself, ``memabra policies list`` and the admin's Roll back): the snapshot it replaced
    when it was made active, else (activated before revision 0011, or that snapshot is gone) its
    parent, each only while it exists in the same policy (``policy_of``: a stored snapshot's
    policy, ``None`` when there is none). ``None``: nothing to roll back to."""
    for version in (previous_active, parent):
        if version is not None and policy_of(version) == policy:
            return version
    return None


def rollback_target(s: Session, active: PolicySnapshotRow) -> PolicySnapshotRow:
    """The snapshot a rollback of ``active`` re-activates (:func:`rollback_version`), locked."""

    def locked_policy(version: str) -> str | None:
        row = s.get(PolicySnapshotRow, version, with_for_update=True)
        return None if row is None else row.policy

    version = rollback_version(active.previous_active, active.parent, active.policy, locked_policy)
    target = None if version is None else s.get(PolicySnapshotRow, version)
    if target is None:
        raise SnapshotError(
            f"snapshot {active.version!r} of policy {active.policy!r} has no parent to roll back to "
            "(and replaced no snapshot when it was made active); to serve another snapshot, promote it: "
            "`memabra policies promote VERSION` (see `memabra policies list`)"
        )
    return target
