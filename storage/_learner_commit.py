"""The learner's commit: its model (a policy snapshot) and its read position, written in one
transaction guarded by the previous position (:class:`~memabra.storage._learner.LearnerStore`
retries it whole on a transient conflict)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import ColumnElement, and_, insert, or_, select, update
from sqlalchemy.orm import Session

from memabra._errors import MemabraError
from memabra._records import PolicySnapshot, utcnow
from memabra.storage._from_rows import reward_from_row
from memabra.storage._learner_models import LearnerStateRow
from memabra.storage._models import PolicySnapshotRow, RewardRow, table_of
from memabra.storage._snapshots import lock_policy

__all__ = ["START", "LeaseLostError", "ReadPosition", "commit_checkpoint", "read_digest"]


class LeaseLostError(MemabraError):
    """Another learner committed since this one read its position: this one must stand by."""


@dataclass(frozen=True, slots=True, order=True)
class ReadPosition:
    """A point in the commit order of final rewards (the last one read)."""

    seq: int
    episode_id: str


START = ReadPosition(-1, "")


def read_digest(digest: int, position: ReadPosition, total: float) -> int:
    """``digest`` with the reward at ``position`` read too, at ``total``: an order-free fingerprint
    of the rewards a learner read since its last commit (0: none), which its commit compares with
    the log's. The total is in it because ``rewards recompute`` re-totals final rewards in place: a
    reward read before its page and committed after was learned at a total the log no longer holds."""
    one = hashlib.blake2b(f"{position.seq}:{position.episode_id}:{total.hex()}".encode(), digest_size=8).digest()
    return digest ^ int.from_bytes(one, "big")


def commit_checkpoint(
    s: Session,
    snapshot: PolicySnapshot,
    *,
    previous: ReadPosition,
    position: ReadPosition,
    learned: int,
    read: int | None = None,
) -> PolicySnapshot:
    """The learner commit's one transaction (see :meth:`LearnerStore.commit`): move the position
    from ``previous`` to ``position`` (the guard), store ``snapshot``, publish it when the active
    snapshot is still the learner's own, mark the rewards read as learned. ``read``: the
    :func:`read_digest` of the rewards read since ``previous``; refused (:class:`LeaseLostError`)
    when the log's rewards between the two positions are no longer those."""
    now = utcnow()
    policy = snapshot.policy
    # The guard is the first statement, a write: SQLite takes its write lock here.
    moved = s.execute(
        update(LearnerStateRow)
        .where(
            LearnerStateRow.policy == policy,
            LearnerStateRow.position_seq == previous.seq,
            LearnerStateRow.position_episode == previous.episode_id,
        )
        .values(position_seq=position.seq, position_episode=position.episode_id, learned=learned, updated_at=now)
    )
    state = s.get(LearnerStateRow, policy)
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        if state is not None or previous != START:
            raise LeaseLostError(f"learner position of policy {policy!r} moved: another learner committed")
        state = LearnerStateRow(
            policy=policy,
            snapshot_version=None,
            position_seq=position.seq,
            position_episode=position.episode_id,
            learned=learned,
            published=None,
            updated_at=now,
        )
        s.add(state)
        s.flush()
    assert state is not None
    if read is not None and position != previous and _logged_digest(s, previous, position) != read:
        raise LeaseLostError(
            f"the rewards the learner of policy {policy!r} read since its last commit (up to episode "
            f"{position.episode_id}, commit seq {position.seq}) are no longer those the log holds there "
            "(restored from a backup, erased or re-totalled meanwhile): what it learned since its last commit is dropped "
            "and learned again from the log"
        )
    lock_policy(s, policy)  # a promote or rollback lands before this read or after the commit
    active = s.scalar(
        select(PolicySnapshotRow.version).where(
            PolicySnapshotRow.policy == policy, PolicySnapshotRow.status == "active"
        )
    )
    # an operator promoting the learner's newest candidate hands serving back to it
    publish = active is None or state.published is None or active in (state.published, state.snapshot_version)
    stored = replace(snapshot, version=_free_version(s, snapshot.version), status="active" if publish else "candidate")
    parent = stored.parent if stored.parent and s.get(PolicySnapshotRow, stored.parent) is not None else None
    stored = replace(stored, parent=parent)
    if publish:
        s.execute(
            update(PolicySnapshotRow)
            .where(PolicySnapshotRow.policy == policy, PolicySnapshotRow.status == "active")
            .values(status="retired")
        )
    s.execute(
        insert(table_of(PolicySnapshotRow)),
        [
            {
                "version": stored.version,
                "policy": policy,
                "parent": stored.parent,
                "model": stored.model,
                "learner_args": _thaw(stored.learner_args),
                "metrics": _thaw(stored.metrics),
                "status": stored.status,
                "created_at": stored.created_at,
                # what a rollback of a published snapshot returns to (revision 0011)
                "previous_active": active if publish else None,
            }
        ],
    )
    state.snapshot_version = stored.version
    if publish:
        state.published = stored.version
    if position != previous:
        s.execute(update(RewardRow).where(*_between(previous, position)).values(learned_at=now))
    return stored


def _between(previous: ReadPosition, position: ReadPosition) -> tuple[ColumnElement[bool], ...]:
    """The rewards after ``previous`` up to ``position`` in the commit order: those read between."""
    return (
        or_(
            RewardRow.commit_seq > previous.seq,
            and_(RewardRow.commit_seq == previous.seq, RewardRow.episode_id > previous.episode_id),
        ),
        or_(
            RewardRow.commit_seq < position.seq,
            and_(RewardRow.commit_seq == position.seq, RewardRow.episode_id <= position.episode_id),
        ),
    )


def _logged_digest(s: Session, previous: ReadPosition, position: ReadPosition) -> int:
    """The :func:`read_digest` of the final rewards the log holds between the two positions: those a
    learner read there, unless the log changed under it. A log restored from a backup keeps the old
    position but not the rewards read since, and numbers its new rewards again from the backup's
    counter: checking only the last reward read passes once the learner has read on into those, and
    committing would claim the lost rewards and mark as learned the new ones it skipped."""
    digest = 0
    rows = s.scalars(
        select(RewardRow).where(
            RewardRow.final.is_(True), RewardRow.commit_seq.is_not(None), *_between(previous, position)
        )
    )
    for row in rows:
        # the total as the learner read it (reward_from_row, as read_final gives it)
        position_read = ReadPosition(int(row.commit_seq or 0), row.episode_id)  # never NULL: filtered
        digest = read_digest(digest, position_read, reward_from_row(row).total)
    return digest


def _thaw(value: Any) -> Any:
    """Frozen record mappings and tuples back to plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value


def _free_version(s: Session, version: str) -> str:
    """``version``, or a suffixed one when a snapshot of that name exists (another lineage)."""
    candidate, n = version, 1
    while s.get(PolicySnapshotRow, candidate) is not None:
        n += 1
        candidate = f"{version}~{n}"
    return candidate
