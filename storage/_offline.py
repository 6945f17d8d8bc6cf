"""Offline reads and results: every decision for replay, and OPE results (MemPO's reads and labels:
:mod:`memabra.storage._mempo_log`)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, func, insert, or_, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._records import (
    LoggedDecision,
    OPEResult,
    PolicySnapshot,
    RewardBreakdown,
    Selection,
)
from memabra.storage import _convert as cv
from memabra.storage._episodes import assemble_selections
from memabra.storage._models import (
    DecisionRow,
    EpisodeRow,
    OPERunRow,
    PolicySnapshotRow,
    RewardRow,
    table_of,
)
from memabra.storage._policy_versions import _IN_CHUNK, _updates, snapshot_index_for
from memabra.storage._rows import clean_text, prepare
from memabra.storage._snapshots import add_snapshot, snapshot_row_values
from memabra.storage._tx import Transactions

logger = logging.getLogger("memabra")

__all__ = [
    "DECISION_CHUNK",
    "ServedReward",
    "count_rewarded",
    "iter_decisions",
    "rewarded_time_at",
    "iter_selections",
    "list_ope_runs",
    "logged_policies",
    "unlogged_policies",
    "check_ope_policy",
    "record_ope_results",
    "ope_run_rows",
    "served_rewards",
    "reward_settings",
]

# decisions read per round trip when streaming the log: each brings its candidates' rows, features
# and metadata decoded (a 128-tool registry: 128 rows a decision), so 1,000 at a time held about
# 600 MB for `memabra ope log` on the multi-turn bench's log and 200 about 300 MB, at the same speed
DECISION_CHUNK = 200


def iter_selections(
    tx: Transactions, since: datetime | None, until: datetime | None, chunk_size: int
) -> Iterator[tuple[Selection, RewardBreakdown | None]]:
    """Every logged decision in time order with its episode's reward (see :func:`iter_decisions`)."""
    for decision in iter_decisions(tx, since, until, chunk_size, with_used=False):
        yield decision.selection, decision.reward


def check_window(since: datetime | None, until: datetime | None, chunk_size: int = 1) -> None:
    """Refuse, before any read, a window the database would only reject mid-stream."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise InvalidRecordError(f"{name} must be timezone-aware (UTC), got a naive datetime {value.isoformat()}")
    if chunk_size < 1:
        raise InvalidRecordError(f"chunk_size must be at least 1, got {chunk_size}")


def iter_decisions(
    tx: Transactions,
    since: datetime | None,
    until: datetime | None,
    chunk_size: int,
    *,
    with_used: bool = True,
    user_id: str | None = None,
    logged_by: Collection[str] | None = None,
) -> Iterator[LoggedDecision]:
    """Every logged decision in time order (only ``user_id``'s when given; only those the policies
    ``logged_by`` names logged, when given) with its episode's reward and used candidates, read in
    chunks through a server-side cursor so memory stays flat however long the log is."""
    stmt = select(DecisionRow).order_by(DecisionRow.created_at, DecisionRow.id)
    if user_id is not None:
        stmt = stmt.where(DecisionRow.user_id == clean_text(user_id))
    if logged_by is not None:
        # in the query: another policy's decisions are never assembled (their candidates are most of a read)
        stmt = stmt.where(DecisionRow.policy.in_(sorted(clean_text(name) for name in logged_by)))
    if since is not None:
        stmt = stmt.where(DecisionRow.created_at >= since)
    if until is not None:
        stmt = stmt.where(DecisionRow.created_at < until)
    with Session(tx.engine) as stream, Session(tx.engine) as s:
        result = stream.scalars(stmt.execution_options(stream_results=True, yield_per=chunk_size))
        for chunk in result.partitions():
            assembled = assemble_selections(s, chunk)
            episode_ids = list({d.episode_id for d in chunk})
            rewards: dict[str, tuple[RewardBreakdown | None, bool, datetime | None]] = {
                r.episode_id: (cv.reward_from_row(r), bool(r.final), r.computed_at)
                for r in s.scalars(select(RewardRow).where(RewardRow.episode_id.in_(episode_ids)))
            }
            used: dict[str, frozenset[str]] = {}
            if with_used:
                rows = s.execute(select(EpisodeRow.id, EpisodeRow.used_ids).where(EpisodeRow.id.in_(episode_ids)))
                used = {eid: frozenset(ids) for eid, ids in rows if ids is not None}
            by_id = {sel.id: sel for sels in assembled.values() for sel in sels}
            for d in chunk:
                selection = by_id.get(d.id)
                if selection is None:  # deleted (episodes delete) while the log was streamed
                    continue
                reward, final, at = rewards.get(d.episode_id, (None, False, None))
                yield LoggedDecision(selection, reward, used.get(d.episode_id), final, d.episode_id, at)
            s.expunge_all()


def _rewarded(since: datetime | None, include_provisional: bool, logged_by: Collection[str] | None) -> Select[datetime]:
    """Decisions whose episode has a reward (a final one unless ``include_provisional``), by time;
    only those the policies ``logged_by`` names logged, when given."""
    stmt = select(DecisionRow.created_at).join(RewardRow, RewardRow.episode_id == DecisionRow.episode_id)
    if not include_provisional:
        stmt = stmt.where(RewardRow.final.is_(True))
    if since is not None:
        stmt = stmt.where(DecisionRow.created_at >= since)
    if logged_by is not None:
        stmt = stmt.where(DecisionRow.policy.in_(sorted(clean_text(name) for name in logged_by)))
    return stmt


def count_rewarded(
    tx: Transactions, since: datetime | None, include_provisional: bool, logged_by: Collection[str] | None = None
) -> int:
    """How many decisions :func:`iter_decisions` would yield with a (final) reward, without reading them."""
    rewarded = _rewarded(since, include_provisional, logged_by).subquery()
    with tx.read() as s:
        return int(s.scalar(select(func.count()).select_from(rewarded)) or 0)


def rewarded_time_at(
    tx: Transactions,
    position: int,
    since: datetime | None,
    include_provisional: bool,
    logged_by: Collection[str] | None = None,
) -> datetime:
    """The time of the rewarded decision at ``position`` (0-based) in the log's time order."""
    stmt = _rewarded(since, include_provisional, logged_by).order_by(DecisionRow.created_at, DecisionRow.id)
    with tx.read() as s:
        at = s.scalar(stmt.offset(position).limit(1))
    if at is None:
        raise InvalidRecordError(f"the log holds no rewarded decision at position {position}")
    return at


def logged_policies(tx: Transactions) -> list[str]:
    """The policies that logged at least one decision, by name (the decision row's ``policy``)."""
    with tx.read() as s:
        return sorted(s.scalars(select(DecisionRow.policy).distinct()))


def unlogged_policies(tx: Transactions, names: Collection[str]) -> list[str]:
    """Those of ``names`` that logged no decision. One EXISTS a name, which stops at its first
    decision: no index leads with ``policy``, and a DISTINCT over a long log reads all of it."""
    with tx.read() as s:
        return sorted(
            name
            for name in names
            if not s.scalar(select(select(DecisionRow.id).where(DecisionRow.policy == clean_text(name)).exists()))
        )


def record_ope_results(tx: Transactions, results: Sequence[OPEResult], snapshot: PolicySnapshot | None = None) -> None:
    """Store an offline evaluation's rows in one transaction; with ``snapshot`` (the candidate
    ``train --from-log`` keeps), save it in that same transaction: a crash or a refused write
    between two would leave a snapshot in the log without the run that judged it."""
    if snapshot is not None and snapshot.status != "candidate":
        # only a candidate: activating one takes the policy's lock and retires the active one (_snapshots)
        raise InvalidRecordError(
            f"snapshot {snapshot.version!r} is {snapshot.status!r}: only a candidate is saved with its OPE results"
        )
    if not results and snapshot is None:
        return
    rows = prepare(table_of(OPERunRow), [cv.ope_values(r) for r in results]) if results else []
    versions = {r["snapshot_version"] for r in rows if r["snapshot_version"] is not None}
    saved = snapshot_row_values(snapshot) if snapshot is not None else None

    def work(s: Session) -> None:
        if snapshot is not None and saved is not None:
            add_snapshot(s, snapshot, saved)
        for version in sorted(versions):
            if s.get(PolicySnapshotRow, version) is None:
                raise InvalidRecordError(f"OPE result names snapshot {version!r}, which is not in the log")
        if rows:
            s.execute(insert(table_of(OPERunRow)), rows)

    tx.write(work, what="record_ope_results")


def check_ope_policy(policy: str) -> None:
    """Raise :class:`InvalidRecordError` for a target name a stored run could not hold: checked
    before an evaluation that takes minutes, not when its rows are written."""
    prepare(table_of(OPERunRow), [{"policy": policy}])


def list_ope_runs(tx: Transactions, version: str | None, policy: str | None, limit: int) -> list[OPEResult]:
    stmt = select(OPERunRow).order_by(OPERunRow.created_at.desc(), OPERunRow.estimator).limit(limit)
    if version is not None:
        stmt = stmt.where(OPERunRow.snapshot_version == clean_text(version))
    if policy is not None:
        stmt = stmt.where(OPERunRow.policy == clean_text(policy))
    with tx.read() as s:
        return [cv.ope_from_row(r) for r in s.scalars(stmt)]


def ope_run_rows(tx: Transactions, run_id: str) -> list[OPEResult]:
    """The rows of the stored run ``run_id`` names, whole or by a prefix (``ope runs`` shows the
    first 8 characters); :class:`InvalidRecordError` when none or several runs match."""
    wanted = clean_text(run_id.strip())
    if not wanted:
        raise InvalidRecordError("name a stored OPE run by its id (memabra ope runs lists them)")
    with tx.read() as s:
        rows = list(s.scalars(select(OPERunRow).where(OPERunRow.run_id == wanted)))
        if not rows:
            stmt = select(OPERunRow.run_id).where(OPERunRow.run_id.startswith(wanted, autoescape=True)).distinct()
            found = sorted(s.scalars(stmt.limit(6)))
            if len(found) > 1:
                shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
                raise InvalidRecordError(
                    f"run id {run_id!r} is the start of several stored runs ({shown}): give more of it"
                )
            if found:
                rows = list(s.scalars(select(OPERunRow).where(OPERunRow.run_id == found[0])))
        if not rows:
            raise InvalidRecordError(f"no stored OPE run with id {run_id!r} (memabra ope runs lists them)")
        return [cv.ope_from_row(r) for r in rows]


@dataclass(frozen=True, slots=True)
class ServedReward:
    """A decision a snapshot served (its own version or an online update of it) and its
    episode's reward: ``None`` before one is recorded, ``final`` once feedback settled it."""

    created_at: datetime
    policy_version: str
    reward: RewardBreakdown | None
    final: bool


def served_rewards(
    tx: Transactions, snapshot: str, since: datetime | None, until: datetime | None
) -> Iterator[ServedReward]:
    """The decisions in ``[since, until)`` whose logged policy version grew from ``snapshot``
    (:func:`~memabra.storage.snapshot_group`, the rule the policies page counts by), each with
    its episode's reward: in time order within each batch of versions read together, not across
    batches (a snapshot with many online updates takes several)."""
    check_window(since, until)
    column = DecisionRow.policy_version
    grown = _updates(snapshot)
    prefix = grown[0] if grown is not None else snapshot
    near = or_(column == snapshot, column.startswith(prefix + "+", autoescape=True))
    with tx.read() as s:
        versions = [str(v) for v in s.scalars(select(column).where(near).distinct())]
        index = snapshot_index_for(s, versions)
    served = sorted(v for v in versions if index.group(v) == snapshot)
    for i in range(0, len(served), _IN_CHUNK):
        stmt = (
            select(DecisionRow.created_at, DecisionRow.policy_version, RewardRow)
            .outerjoin(RewardRow, RewardRow.episode_id == DecisionRow.episode_id)
            .where(column.in_(served[i : i + _IN_CHUNK]))
            .order_by(DecisionRow.created_at, DecisionRow.id)
        )
        if since is not None:
            stmt = stmt.where(DecisionRow.created_at >= since)
        if until is not None:
            stmt = stmt.where(DecisionRow.created_at < until)
        with Session(tx.engine) as s:
            for at, version, reward in s.execute(stmt.execution_options(yield_per=DECISION_CHUNK)):
                yield ServedReward(
                    at, version, None if reward is None else cv.reward_from_row(reward), bool(reward and reward.final)
                )


def reward_settings(
    tx: Transactions, first: datetime, last: datetime, logged_by: Collection[str] | None
) -> set[tuple[str, tuple[tuple[str, float], ...]]]:
    """The (reward version, weights) pairs the rewards of the decisions from ``first`` to
    ``last`` (both included; only ``logged_by``'s when given) were computed under."""
    stmt = (
        select(RewardRow.reward_version, RewardRow.weights)
        .join(DecisionRow, DecisionRow.episode_id == RewardRow.episode_id)
        .where(DecisionRow.created_at >= first, DecisionRow.created_at <= last)
    )
    if logged_by is not None:
        stmt = stmt.where(DecisionRow.policy.in_(sorted(clean_text(name) for name in logged_by)))
    with Session(tx.engine) as s:
        return {
            (str(version), tuple(sorted((str(k), float(v)) for k, v in (weights or {}).items())))
            for version, weights in s.execute(stmt.execution_options(yield_per=DECISION_CHUNK))
        }
