"""Promote and roll back policy snapshots with an audit trail.

Each status change a person makes is appended to the ``admin_history`` list in the metrics of
every snapshot it touches (the one promoted, the one it retired, the one a rollback re-activates:
what the rolled-back snapshot replaced when it was promoted, else its parent),
in the same transaction as the change itself: a snapshot never changes status without its entry,
and an entry never describes a change that did not happen. The newest :data:`MAX_HISTORY` entries
per snapshot are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError, SnapshotError
from memabra._records import JSONValue, utcnow
from memabra.storage._log import EpisodeLog
from memabra.storage._models import PolicySnapshotRow, table_of
from memabra.storage._rows import clean_text, prepare
from memabra.storage._snapshots import _policy_locked_row, activate, rollback_target, rollback_version

__all__ = [
    "HISTORY_KEY",
    "MAX_AUDIT_TEXT",
    "MAX_HISTORY",
    "Promotion",
    "SnapshotAudit",
    "StatusChange",
    "status_history",
]

HISTORY_KEY = "admin_history"
# a snapshot promoted and rolled back every day keeps a quarter of a year of entries
MAX_HISTORY = 100
# who, from where and why are each kept up to this many characters (the admin's reason field stops there too)
MAX_AUDIT_TEXT = 200


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One entry of a snapshot's audit trail: what happened to it, who did it, when and from where.

    ``action`` is ``promoted``, ``rolled back`` (retired by a rollback), ``re-activated`` (the snapshot a
    rollback made active) or ``retired`` (the previously active snapshot a promotion replaced);
    ``by`` names the signed-in principal (empty when unknown); ``note`` says what caused it;
    ``reason`` is why, in the words of the person who made the change (empty when none was given)."""

    action: str
    by: str
    at: datetime
    client: str = ""
    note: str = ""
    reason: str = ""

    def as_json(self) -> dict[str, JSONValue]:
        return {
            "action": self.action,
            "by": self.by,
            "at": self.at.isoformat(),
            "client": self.client,
            "note": self.note,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Promotion:
    """What :meth:`SnapshotAudit.promote` did. ``version`` is its policy's active snapshot either
    way; ``changed`` is false when it already was (nothing written, no audit entry: a retried
    promote is not an error). ``retired``: the snapshot it replaced (``None`` when none was active,
    or nothing changed); ``rollback_to``: what a rollback of ``version`` re-activates now (``None``:
    nothing to roll back to)."""

    version: str
    policy: str
    changed: bool
    retired: str | None
    rollback_to: str | None


def status_history(metrics: Mapping[str, Any]) -> tuple[StatusChange, ...]:
    """A snapshot's audit trail from its metrics, oldest first; malformed entries are skipped."""
    raw = metrics.get(HISTORY_KEY)
    if not isinstance(raw, (list, tuple)):
        return ()
    out = []
    for entry in raw:
        if not isinstance(entry, Mapping):
            continue
        try:
            at = datetime.fromisoformat(str(entry["at"]))
        except (KeyError, ValueError):
            continue
        out.append(
            StatusChange(
                action=str(entry.get("action", "")),
                by=str(entry.get("by", "")),
                at=at if at.tzinfo is not None else at.replace(tzinfo=UTC),
                client=str(entry.get("client", "") or ""),
                note=str(entry.get("note", "") or ""),
                reason=str(entry.get("reason", "") or ""),
            )
        )
    return tuple(out)


class SnapshotAudit:
    """Status changes of an :class:`EpisodeLog`'s snapshots, each recorded with who made it."""

    def __init__(self, log: EpisodeLog) -> None:
        self._tx = log.transactions

    def promote(
        self,
        version: str,
        *,
        by: str,
        client: str = "",
        at: datetime | None = None,
        reason: str = "",
        replacing: str | None = None,
    ) -> Promotion:
        """Make ``version`` its policy's active snapshot and retire the one active before; says
        what it retired, read in the promote's own transaction (another promote may have landed
        since the caller looked). Already active: nothing is written and ``changed`` is false.
        With ``replacing``, only while that snapshot is the active one (what the operator
        reviewed; ``""``: while none of the policy's is), or where ``version`` is active and replaced
        it (the same promote, retried): :class:`SnapshotError` otherwise (nothing is written)."""
        when = _when(at)

        def work(s: Session) -> Promotion:
            row = _policy_locked_row(s, version)
            changed = row.status != "active"
            # a retry of a promote that went through (its answer lost) names what it replaced: done
            retried = not changed and (row.previous_active or "") == replacing
            if replacing is not None and not retried:
                _expect_active(s, row.policy, replacing, f"promote {row.version}")
            replaced = None
            if changed:
                retired = StatusChange(
                    "retired", _text(by), when, _text(client), f"{row.version} promoted", _text(reason)
                )
                replaced = activate(s, row, retired=lambda other: _append(other, retired))
                _append(row, StatusChange("promoted", _text(by), when, _text(client), reason=_text(reason)))
            back = rollback_version(row.previous_active, row.parent, row.policy, lambda v: _policy_of(s, v))
            return Promotion(row.version, row.policy, changed, replaced, back)

        return self._tx.write(work, what="promote")

    def rollback(self, version: str, *, by: str, client: str = "", at: datetime | None = None, reason: str = "") -> str:
        """Retire the active snapshot ``version`` and make active again the snapshot it replaced when
        it was promoted (its parent for snapshots activated before revision 0011); returns that
        version. :class:`SnapshotError` when ``version`` is not active or there is nothing to
        return to."""
        when = _when(at)

        def work(s: Session) -> str:
            row = _policy_locked_row(s, version)
            if row.status != "active":
                # two operators rolling back at once: the second must not take the policy a second step back
                raise SnapshotError(
                    f"snapshot {row.version} is not active ({row.status}); only the active one rolls back. "
                    "Another promote or rollback may have landed since you looked: check `memabra policies list`"
                )
            target = rollback_target(s, row)
            why = _text(reason)
            others = StatusChange("retired", _text(by), when, _text(client), f"rollback to {target.version}", why)
            back = StatusChange("rolled back", _text(by), when, _text(client), f"{target.version} re-activated", why)
            activate(s, target, record=False, retired=lambda other: _append(other, back if other is row else others))
            _append(
                target, StatusChange("re-activated", _text(by), when, _text(client), f"rollback of {row.version}", why)
            )
            return target.version

        return self._tx.write(work, what="rollback")


def _expect_active(s: Session, policy: str, expected: str, what: str) -> None:
    """Refuse ``what`` unless ``expected`` is ``policy``'s active snapshot (``""``: unless none is;
    the caller holds the policy's lock, so it stays so until the change commits)."""
    active = s.scalar(
        select(PolicySnapshotRow.version).where(
            PolicySnapshotRow.policy == policy, PolicySnapshotRow.status == "active"
        )
    )
    if (active or "") != clean_text(expected):
        now = f"{active} is active now" if active is not None else "no snapshot is active now"
        was = f"replace {expected}" if expected else "be the first active one"
        raise SnapshotError(
            f"did not {what}: it was to {was}, but {now} (another promote, rollback or a learner's "
            "publish landed since you looked); review `memabra policies list` and try again"
        )


def _policy_of(s: Session, version: str) -> str | None:
    return s.scalar(select(PolicySnapshotRow.policy).where(PolicySnapshotRow.version == version))


def _when(at: datetime | None) -> datetime:
    when = at or utcnow()
    if when.tzinfo is None:
        raise InvalidRecordError("at must be timezone-aware")
    return when.astimezone(UTC)


def _text(value: str) -> str:
    return str(value)[:MAX_AUDIT_TEXT]


def _append(row: PolicySnapshotRow, change: StatusChange) -> None:
    metrics = dict(row.metrics or {})
    history = (
        [e for e in metrics.get(HISTORY_KEY, []) if isinstance(e, dict)]
        if isinstance(metrics.get(HISTORY_KEY), list)
        else []
    )
    metrics[HISTORY_KEY] = [*history, change.as_json()][-MAX_HISTORY:]
    # a new dict, not a mutated one: the JSON column only notices an assignment
    row.metrics = prepare(table_of(PolicySnapshotRow), [{"metrics": metrics}])[0]["metrics"]
