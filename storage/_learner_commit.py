"""The learner's commit: its model (a policy snapshot) and its read position, written in one
transaction guarded by the previous position (:class:`~memabra.storage._learner.LearnerStore`
retries it whole on a transient conflict)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.orm import Session

from memabra._errors import MemabraError
from memabra._records import PolicySnapshot, utcnow
from memabra.storage._learner_models import LearnerStateRow
from memabra.storage._models import PolicySnapshotRow, RewardRow, table_of
from memabra.storage._snapshots import lock_policy

__all__ = ["START", "LeaseLostError", "ReadPosition", "commit_checkpoint"]


class LeaseLostError(MemabraError):
    """Another learner committed since this one read its position: this one must stand by."""


@dataclass(frozen=True, slots=True, order=True)
class ReadPosition:
    """A point in the commit order of final rewards (the last one read)."""

    seq: int
    episode_id: str


START = ReadPosition(-1, "")


def commit_checkpoint(
    s: Session,
    snapshot: PolicySnapshot,
    *,
    previous: ReadPosition,
    position: ReadPosition,
    learned: int,
    confirm_read: bool = False,
) -> PolicySnapshot:
    """The learner commit's one transaction (see :meth:`LearnerStore.commit`): move the position
    from ``previous`` to ``position`` (the guard), store ``snapshot``, publish it when the active
    snapshot is still the learner's own, mark the rewards read as learned. ``confirm_read``: refuse
    (:class:`LeaseLostError`) when the reward at ``position`` is no longer in the log."""
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
    if confirm_read and position != previous and not _still_logged(s, position):
        raise LeaseLostError(
            f"the last reward the learner of policy {policy!r} read (episode {position.episode_id}, commit "
            f"seq {position.seq}) is no longer in the log (restored from a backup?): what it learned since "
            "its last commit is dropped and learned again from the log"
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
        s.execute(
            update(RewardRow)
            .where(
                or_(
                    RewardRow.commit_seq > previous.seq,
                    and_(RewardRow.commit_seq == previous.seq, RewardRow.episode_id > previous.episode_id),
                ),
                or_(
                    RewardRow.commit_seq < position.seq,
                    and_(RewardRow.commit_seq == position.seq, RewardRow.episode_id <= position.episode_id),
                ),
            )
            .values(learned_at=now)
        )
    return stored


def _still_logged(s: Session, position: ReadPosition) -> bool:
    """Whether the reward at ``position`` is in the log, at that place in the commit order. A log
    restored to an earlier point keeps the learner's old position (the guard passes) but not the
    rewards read since: committing would claim them and mark the rewards that took their commit
    numbers as learned."""
    found = s.scalar(
        select(RewardRow.episode_id).where(
            RewardRow.episode_id == position.episode_id, RewardRow.commit_seq == position.seq
        )
    )
    return found is not None


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
