"""Policy snapshots: saved model bytes, promote (make active) and roll back (re-activate the parent).

At most one snapshot per policy is ``active``: activating one retires the others in the same
transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError, SnapshotError, UnknownSnapshotError
from memabra._records import PolicySnapshot
from memabra.storage import _convert as cv
from memabra.storage._models import PolicySnapshotRow, table_of
from memabra.storage._rows import clean_text, prepare
from memabra.storage._tx import Transactions

__all__ = [
    "SNAPSHOT_STATUSES",
    "get_snapshot",
    "latest_snapshot",
    "list_snapshots",
    "rollback",
    "save_snapshot",
    "set_snapshot_status",
    "update_snapshot_metrics",
]

SNAPSHOT_STATUSES = ("candidate", "active", "retired")


def save_snapshot(tx: Transactions, snapshot: PolicySnapshot) -> None:
    values = prepare(table_of(PolicySnapshotRow), [cv.snapshot_values(snapshot)])[0]

    def work(s: Session) -> None:
        if snapshot.parent is not None and s.get(PolicySnapshotRow, values["parent"]) is None:
            raise InvalidRecordError(f"snapshot parent {snapshot.parent!r} is not in the log")
        if s.get(PolicySnapshotRow, values["version"]) is not None:
            raise InvalidRecordError(f"a snapshot with version {snapshot.version!r} already exists")
        s.add(PolicySnapshotRow(**values))
        if snapshot.status == "active":
            s.flush()
            _retire_others(s, values["policy"], values["version"])

    tx.write(work, what="save_snapshot")


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
        row = _row(s, version, lock=True)
        row.status = status
        if status == "active":
            s.flush()
            _retire_others(s, row.policy, row.version)

    tx.write(work, what="set_snapshot_status")


def rollback(tx: Transactions, policy: str) -> PolicySnapshot:
    """Re-activate the parent of the policy's active snapshot (retiring the active one); returns
    the snapshot now active. :class:`SnapshotError` when there is nothing to roll back to."""

    def work(s: Session) -> PolicySnapshot:
        active = s.scalars(
            select(PolicySnapshotRow)
            .where(PolicySnapshotRow.policy == clean_text(policy), PolicySnapshotRow.status == "active")
            .with_for_update()
        ).first()
        if active is None:
            raise SnapshotError(f"policy {policy!r} has no active snapshot to roll back")
        if active.parent is None:
            raise SnapshotError(f"snapshot {active.version!r} of policy {policy!r} has no parent to roll back to")
        parent = _row(s, active.parent, lock=True)
        parent.status = "active"
        s.flush()
        _retire_others(s, parent.policy, parent.version)
        s.refresh(parent)
        return cv.snapshot_from_row(parent)

    return tx.write(work, what="rollback")


def update_snapshot_metrics(tx: Transactions, version: str, metrics: Mapping[str, Any]) -> None:
    def work(s: Session) -> None:
        row = _row(s, version, lock=True)
        merged = {**(row.metrics or {}), **cv.thaw(metrics)}
        row.metrics = prepare(table_of(PolicySnapshotRow), [{"metrics": merged}])[0]["metrics"]

    tx.write(work, what="update_snapshot_metrics")


def _row(s: Session, version: str, *, lock: bool = False) -> PolicySnapshotRow:
    row = s.get(PolicySnapshotRow, clean_text(version), with_for_update=lock or None)
    if row is None:
        raise UnknownSnapshotError(f"no policy snapshot with version {version!r}")
    return row


def _retire_others(s: Session, policy: str, version: str) -> None:
    s.execute(
        update(PolicySnapshotRow)
        .where(
            PolicySnapshotRow.policy == policy,
            PolicySnapshotRow.status == "active",
            PolicySnapshotRow.version != version,
        )
        .values(status="retired")
    )
