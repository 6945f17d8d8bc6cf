"""The episode log: takes and returns records; ORM rows never leave this package.

Writes are transactional: an episode, its decisions, every offered candidate, the slot
distributions and the steps land together or not at all. Bulk writes use one multi-row
statement per table, so 1,000 decisions of 20 candidates cost a handful of round trips.
"""

from __future__ import annotations

import base64
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Integer, and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from memabra._errors import FeedbackError, InvalidRecordError, UnknownEpisodeError
from memabra._records import (
    CandidateKind,
    Episode,
    Feedback,
    FeedbackReceipt,
    GoldDecision,
    LearningItem,
    MemoryQuality,
    OPEResult,
    Page,
    PolicySnapshot,
    RegistryItem,
    RewardBreakdown,
    RewardWeights,
    Selection,
    utcnow,
)
from memabra.storage import _convert as cv
from memabra.storage._engine import is_postgres, make_engine
from memabra.storage._migrate import check_schema
from memabra.storage._models import (
    DecisionCandidateRow,
    DecisionRow,
    DecisionSlotRow,
    EpisodeRow,
    FeedbackRow,
    MemoryScoreRow,
    OPERunRow,
    PolicySnapshotRow,
    RegistryRow,
    RewardRow,
    StepRow,
)

logger = logging.getLogger("memabra")

DEFAULT_FEEDBACK_WINDOW = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class EpisodeFilter:
    """Filters of an episode listing; every field is optional and they combine with AND."""

    user_id: str | None = None
    thread_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    policy_version: str | None = None
    kind: CandidateKind | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    corrected: bool | None = None


@dataclass(frozen=True, slots=True)
class CandidateStats:
    times_offered: int
    times_chosen: int
    times_used: int


class _OfflineMixin:
    """Offline-evaluation results and MemPO memory-quality labels (schema revision 0002)."""

    _engine: Engine

    def _session(self) -> Any:  # provided by EpisodeLog
        raise TypeError("mixin")  # pragma: no cover

    def record_ope_results(self, results: Sequence[OPEResult]) -> None:
        if not results:
            return
        with self._session() as s:
            versions = {r.snapshot_version for r in results if r.snapshot_version is not None}
            for version in versions:
                if s.get(PolicySnapshotRow, version) is None:
                    raise InvalidRecordError(f"OPE result names snapshot {version!r}, which is not in the log")
            s.execute(
                insert(OPERunRow.__table__),  # type: ignore[arg-type]
                [
                    {
                        "id": r.id, "run_id": r.run_id, "policy": r.policy, "snapshot_version": r.snapshot_version,
                        "estimator": r.estimator, "value": r.value, "ci_low": r.ci_low, "ci_high": r.ci_high,
                        "n_rounds": r.n_rounds, "alpha": r.alpha, "details": cv._thaw(r.details), "created_at": r.created_at,
                    }
                    for r in results
                ],
            )

    def list_ope_runs(self, version: str | None = None, *, policy: str | None = None, limit: int = 1000) -> list[OPEResult]:
        stmt = select(OPERunRow).order_by(OPERunRow.created_at.desc(), OPERunRow.estimator).limit(limit)
        if version is not None:
            stmt = stmt.where(OPERunRow.snapshot_version == version)
        if policy is not None:
            stmt = stmt.where(OPERunRow.policy == policy)
        with self._session() as s:
            return [
                OPEResult(
                    policy=r.policy, estimator=r.estimator, value=r.value, ci_low=r.ci_low, ci_high=r.ci_high,
                    n_rounds=r.n_rounds, alpha=r.alpha, snapshot_version=r.snapshot_version, details=r.details or {},
                    run_id=r.run_id, created_at=r.created_at, id=r.id,
                )
                for r in s.scalars(stmt)
            ]

    def mempo_items(self, *, since: datetime | None = None) -> Iterator[GoldDecision]:
        """Decisions that offered memories and whose episode got a ``gold_answer`` in feedback."""
        stmt = select(FeedbackRow.episode_id, FeedbackRow.payload).order_by(FeedbackRow.received_at)
        if since is not None:
            stmt = stmt.where(FeedbackRow.received_at >= since)
        with self._session() as s:
            gold: dict[str, str] = {}
            for episode_id, payload in s.execute(stmt):
                answer = (payload or {}).get("gold_answer")
                if isinstance(answer, str) and answer.strip():
                    gold[episode_id] = answer
            episode_ids = list(gold)
        for start in range(0, len(episode_ids), 500):
            chunk = episode_ids[start : start + 500]
            with self._session() as s:
                decisions = s.scalars(select(DecisionRow).where(DecisionRow.episode_id.in_(chunk)).order_by(DecisionRow.created_at)).all()
                cands: dict[str, list[DecisionCandidateRow]] = defaultdict(list)
                for c in s.scalars(
                    select(DecisionCandidateRow)
                    .where(DecisionCandidateRow.decision_id.in_([d.id for d in decisions]), DecisionCandidateRow.kind == "memory")
                    .order_by(DecisionCandidateRow.ordinal)
                ):
                    cands[c.decision_id].append(c)
            for d in decisions:
                memories = cands[d.id]
                if memories:
                    yield GoldDecision(
                        id=d.id, question=d.query,
                        selected=tuple(c.text for c in sorted((c for c in memories if c.chosen), key=lambda c: c.slot or 0)),
                        candidates=tuple(c.text for c in memories), gold_answer=gold[d.episode_id],
                    )

    def store_memory_scores(self, scores: Sequence[MemoryQuality]) -> None:
        """Insert or replace MemPO labels (a re-run with another model overwrites)."""
        if not scores:
            return
        with self._session() as s:
            s.execute(delete(MemoryScoreRow).where(MemoryScoreRow.decision_id.in_([q.decision_id for q in scores])))
            s.execute(
                insert(MemoryScoreRow.__table__),  # type: ignore[arg-type]
                [
                    {
                        "decision_id": q.decision_id, "scorer": q.scorer, "p_selected": q.p_selected, "p_all": q.p_all,
                        "difference": q.difference, "reward": q.reward, "answer_tokens": q.answer_tokens, "scored_at": q.scored_at,
                    }
                    for q in scores
                ],
            )

    def memory_scores(self, decision_ids: Sequence[str]) -> dict[str, MemoryQuality]:
        if not decision_ids:
            return {}
        with self._session() as s:
            return {
                r.decision_id: MemoryQuality(r.decision_id, r.scorer, r.p_selected, r.p_all, r.difference, r.reward, r.answer_tokens, r.scored_at)
                for r in s.scalars(select(MemoryScoreRow).where(MemoryScoreRow.decision_id.in_(list(decision_ids))))
            }


class EpisodeLog(_OfflineMixin):
    """The SQL episode log.

    ``EpisodeLog(url)`` opens the database at ``url`` (see
    :func:`memabra.storage.resolve_url` for defaults) and refuses to work unless its schema is at
    this code's migration head; ``memabra db upgrade`` brings it there.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        feedback_window: timedelta = DEFAULT_FEEDBACK_WINDOW,
        check: bool = True,
    ) -> None:
        self._engine = engine if engine is not None else make_engine(url)
        self._owns_engine = engine is None
        self.feedback_window = feedback_window
        if check:
            try:
                check_schema(self._engine)
            except Exception:
                self.close()
                raise

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def url(self) -> str:
        return self._engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        if self._owns_engine:
            self._engine.dispose()

    def __enter__(self) -> EpisodeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self._engine, expire_on_commit=False) as session, session.begin():
            yield session

    # ------------------------------------------------------------------ episodes

    def log_episode(self, episode: Episode) -> None:
        """Write one episode with everything in it, in one transaction."""
        self.log_episodes([episode])

    def log_episodes(self, episodes: Sequence[Episode]) -> None:
        """Write many episodes in one transaction with one multi-row INSERT per table."""
        if not episodes:
            return
        ids = [e.id for e in episodes]
        if len(set(ids)) != len(ids):
            raise InvalidRecordError("log_episodes got the same episode id twice")
        episode_rows, decision_rows, slot_rows, candidate_rows = [], [], [], []
        step_rows, feedback_rows, reward_rows = [], [], []
        chosen_counts: Counter[tuple[str, str, str]] = Counter()
        last_chosen: dict[tuple[str, str, str], datetime] = {}
        for episode in episodes:
            due = episode.created_at + self.feedback_window
            episode_rows.append(cv.episode_values(episode, due))
            for seq, sel in enumerate(episode.selections):
                decision_rows.append(cv.decision_values(episode, seq, sel))
                slot_rows.extend(cv.slot_values(sel))
                candidate_rows.extend(cv.candidate_values(sel, episode.used_ids))
                for cand in sel.chosen:
                    key = (cand.kind.value, str(cand.metadata.get("owner", sel.context.user_id)), cand.id)
                    chosen_counts[key] += 1
                    last_chosen[key] = max(last_chosen.get(key, sel.created_at), sel.created_at)
            step_rows.extend(cv.step_values(episode.id, episode.steps))
            feedback_rows.extend(cv.feedback_values(f, late=False) for f in episode.feedback)
            if episode.reward is not None:
                final = episode.finalized_at is not None
                reward_rows.append(cv.reward_values(episode.id, episode.reward, final=final, at=episode.created_at))
        with self._engine.begin() as conn:
            for table, rows in (
                (EpisodeRow, episode_rows),
                (DecisionRow, decision_rows),
                (DecisionSlotRow, slot_rows),
                (DecisionCandidateRow, candidate_rows),
                (StepRow, step_rows),
                (FeedbackRow, feedback_rows),
                (RewardRow, reward_rows),
            ):
                if rows:
                    conn.execute(insert(table.__table__), rows)  # type: ignore[attr-defined]
            if chosen_counts:
                registry = RegistryRow.__table__
                conn.execute(
                    update(registry)
                    .where(
                        registry.c.kind == bindparam("b_kind"),
                        registry.c.owner == bindparam("b_owner"),
                        registry.c.id == bindparam("b_id"),
                    )
                    .values(
                        times_chosen=registry.c.times_chosen + bindparam("b_n"),
                        last_chosen_at=bindparam("b_at"),
                    ),
                    [
                        {"b_kind": k, "b_owner": o, "b_id": i, "b_n": n, "b_at": last_chosen[(k, o, i)]}
                        for (k, o, i), n in chosen_counts.items()
                    ],
                )

    def get_episode(self, episode_id: str) -> Episode:
        with self._session() as s:
            row = s.get(EpisodeRow, episode_id)
            if row is None:
                raise UnknownEpisodeError(f"no episode with id {episode_id!r}")
            selections = self._load_selections(s, [episode_id]).get(episode_id, ())
            steps = s.scalars(select(StepRow).where(StepRow.episode_id == episode_id).order_by(StepRow.seq)).all()
            feedback = s.scalars(
                select(FeedbackRow).where(FeedbackRow.episode_id == episode_id).order_by(FeedbackRow.received_at)
            ).all()
            reward = s.get(RewardRow, episode_id)
            return Episode(
                user_id=row.user_id,
                query=row.query,
                selections=tuple(selections),
                steps=tuple(cv.step_from_row(r) for r in steps),
                answer=row.answer,
                thread_id=row.thread_id,
                turn=row.turn,
                id=row.id,
                created_at=row.created_at,
                reward=cv.reward_from_row(reward) if reward is not None else None,
                finalized_at=row.finalized_at,
                feedback=tuple(cv.feedback_from_row(f) for f in feedback),
                used_ids=frozenset(row.used_ids) if row.used_ids is not None else None,
                metadata=row.metadata_ or {},
            )

    def _load_selections(self, s: Session, episode_ids: Sequence[str]) -> dict[str, list[Selection]]:
        decisions = s.scalars(
            select(DecisionRow).where(DecisionRow.episode_id.in_(episode_ids)).order_by(DecisionRow.seq)
        ).all()
        return self._assemble(s, decisions)

    def _assemble(self, s: Session, decisions: Sequence[DecisionRow]) -> dict[str, list[Selection]]:
        if not decisions:
            return {}
        ids = [d.id for d in decisions]
        slots: dict[str, list[DecisionSlotRow]] = defaultdict(list)
        for row in s.scalars(select(DecisionSlotRow).where(DecisionSlotRow.decision_id.in_(ids))):
            slots[row.decision_id].append(row)
        cands: dict[str, list[DecisionCandidateRow]] = defaultdict(list)
        for crow in s.scalars(select(DecisionCandidateRow).where(DecisionCandidateRow.decision_id.in_(ids))):
            cands[crow.decision_id].append(crow)
        out: dict[str, list[Selection]] = defaultdict(list)
        for d in decisions:
            out[d.episode_id].append(cv.selection_from_rows(d, slots[d.id], cands[d.id]))
        return out

    def get_selection(self, decision_id: str) -> Selection:
        with self._session() as s:
            row = s.get(DecisionRow, decision_id)
            if row is None:
                raise UnknownEpisodeError(f"no routing decision with id {decision_id!r}")
            return self._assemble(s, [row])[row.episode_id][0]

    def list_episodes(
        self, filters: EpisodeFilter | None = None, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        """Newest first, keyset-paginated on (created_at, id): constant cost per page at any depth."""
        if limit < 1 or limit > 1000:
            raise InvalidRecordError(f"limit must be between 1 and 1000, got {limit}")
        f = filters or EpisodeFilter()
        stmt = select(EpisodeRow)
        conds: list[Any] = []
        if f.user_id is not None:
            conds.append(EpisodeRow.user_id == f.user_id)
        if f.thread_id is not None:
            conds.append(EpisodeRow.thread_id == f.thread_id)
        if f.since is not None:
            conds.append(EpisodeRow.created_at >= f.since)
        if f.until is not None:
            conds.append(EpisodeRow.created_at < f.until)
        if f.policy_version is not None:
            conds.append(EpisodeRow.policy_version == f.policy_version)
        if f.kind is not None:
            conds.append(EpisodeRow.kinds.contains(CandidateKind(f.kind).value))
        if f.reward_min is not None:
            conds.append(EpisodeRow.reward_total >= f.reward_min)
        if f.reward_max is not None:
            conds.append(EpisodeRow.reward_total <= f.reward_max)
        if f.corrected is not None:
            conds.append(EpisodeRow.corrected.is_(f.corrected))
        if cursor is not None:
            at, last_id = _decode_cursor(cursor)
            # Two conditions rather than one OR: the first is a plain index range, so a deep page
            # seeks straight to the cursor instead of scanning every newer row.
            conds.append(EpisodeRow.created_at <= at)
            conds.append(or_(EpisodeRow.created_at < at, EpisodeRow.id < last_id))
        if conds:
            stmt = stmt.where(*conds)
        stmt = stmt.order_by(EpisodeRow.created_at.desc(), EpisodeRow.id.desc()).limit(limit + 1)
        with self._session() as s:
            rows = s.scalars(stmt).all()
        more = len(rows) > limit
        rows = rows[:limit]
        items = tuple(cv.summary_from_row(r) for r in rows)
        next_cursor = _encode_cursor(rows[-1].created_at, rows[-1].id) if more and rows else None
        return Page(items=items, next_cursor=next_cursor)

    def count_episodes(self) -> int:
        with self._session() as s:
            return int(s.scalar(select(func.count()).select_from(EpisodeRow)) or 0)

    # ------------------------------------------------------------------ feedback and rewards

    def add_feedback(self, feedback: Feedback) -> FeedbackReceipt:
        """Store feedback against its episode.

        Returns ``duplicate`` (and writes nothing) when the idempotency key was seen before,
        ``late`` when the episode's reward is already final (stored for review, never learned),
        else ``stored``. An unknown episode or decision id raises and writes nothing.
        """
        with self._session() as s:
            episode = s.get(EpisodeRow, feedback.episode_id, with_for_update=is_postgres(self._engine))
            if episode is None:
                raise UnknownEpisodeError(f"feedback names no known episode: {feedback.episode_id!r}")
            if feedback.decision_id is not None:
                decision = s.get(DecisionRow, feedback.decision_id)
                if decision is None or decision.episode_id != feedback.episode_id:
                    raise FeedbackError(
                        f"feedback names decision {feedback.decision_id!r}, which is not part of episode {feedback.episode_id!r}"
                    )
            existing = s.scalar(select(FeedbackRow).where(FeedbackRow.idempotency_key == feedback.idempotency_key))
            if existing is not None:
                if existing.episode_id != feedback.episode_id:
                    raise FeedbackError(
                        f"idempotency key {feedback.idempotency_key!r} was already used for episode {existing.episode_id!r}"
                    )
                return FeedbackReceipt(existing.id, "duplicate")
            late = episode.finalized_at is not None
            try:
                with s.begin_nested():
                    s.execute(insert(FeedbackRow.__table__), [cv.feedback_values(feedback, late=late)])  # type: ignore[arg-type]
            except IntegrityError:
                # A concurrent post with the same key won the race.
                return FeedbackReceipt(feedback.id, "duplicate")
            if cv.is_correction(feedback):
                episode.corrected = True
            used = feedback.payload.get("used_ids")
            if used is not None and not late:
                self._set_used(s, episode, [str(u) for u in used])
            return FeedbackReceipt(feedback.id, "late" if late else "stored")

    def set_used(self, episode_id: str, used_ids: Iterable[str]) -> None:
        """Record which chosen candidates the agent actually used (their local outcome)."""
        with self._session() as s:
            episode = s.get(EpisodeRow, episode_id)
            if episode is None:
                raise UnknownEpisodeError(f"no episode with id {episode_id!r}")
            self._set_used(s, episode, list(used_ids))

    def _set_used(self, s: Session, episode: EpisodeRow, used_ids: list[str]) -> None:
        previous = set(episode.used_ids or [])
        merged = previous | set(used_ids)
        episode.used_ids = sorted(merged)
        decision_ids = select(DecisionRow.id).where(DecisionRow.episode_id == episode.id)
        table = DecisionCandidateRow.__table__
        chosen = table.c.decision_id.in_(decision_ids) & table.c.chosen.is_(True)
        s.execute(update(table).where(chosen).values(used=table.c.candidate_id.in_(sorted(merged)) if merged else False))
        newly = merged - previous
        if newly:
            rows = s.execute(
                select(table.c.kind, table.c.candidate_id, table.c.metadata).where(
                    chosen, table.c.candidate_id.in_(sorted(newly))
                )
            ).all()
            registry = RegistryRow.__table__
            params = [
                {"b_kind": r.kind, "b_owner": str((r.metadata or {}).get("owner", episode.user_id)), "b_id": r.candidate_id}
                for r in rows
            ]
            if params:
                s.execute(
                    update(registry)
                    .where(
                        registry.c.kind == bindparam("b_kind"),
                        registry.c.owner == bindparam("b_owner"),
                        registry.c.id == bindparam("b_id"),
                    )
                    .values(times_used=registry.c.times_used + 1),
                    params,
                )

    def feedback_for(self, episode_id: str, *, include_late: bool = False) -> tuple[Feedback, ...]:
        with self._session() as s:
            stmt = select(FeedbackRow).where(FeedbackRow.episode_id == episode_id)
            if not include_late:
                stmt = stmt.where(FeedbackRow.late.is_(False))
            return tuple(cv.feedback_from_row(r) for r in s.scalars(stmt.order_by(FeedbackRow.received_at)))

    def put_reward(self, episode_id: str, reward: RewardBreakdown, *, final: bool, at: datetime | None = None) -> bool:
        """Store (or replace) an episode's reward. A reward that is already final is never
        replaced; returns False then. ``final=True`` also closes the episode's feedback window."""
        at = at or utcnow()
        with self._session() as s:
            episode = s.get(EpisodeRow, episode_id, with_for_update=is_postgres(self._engine))
            if episode is None:
                raise UnknownEpisodeError(f"no episode with id {episode_id!r}")
            existing = s.get(RewardRow, episode_id)
            if existing is not None and existing.final:
                return False
            values = cv.reward_values(episode_id, reward, final=final, at=at)
            if existing is not None:
                s.execute(delete(RewardRow).where(RewardRow.episode_id == episode_id))
            s.execute(insert(RewardRow.__table__), [values])  # type: ignore[arg-type]
            episode.reward_total = values["total"]
            if final:
                episode.finalized_at = at
            return True

    def get_reward(self, episode_id: str) -> RewardBreakdown | None:
        with self._session() as s:
            row = s.get(RewardRow, episode_id)
            return cv.reward_from_row(row) if row is not None else None

    def due_episode_ids(self, now: datetime | None = None, *, limit: int = 1000) -> list[str]:
        """Open episodes whose feedback window has passed: they get their default reward."""
        now = now or utcnow()
        with self._session() as s:
            stmt = (
                select(EpisodeRow.id)
                .where(EpisodeRow.finalized_at.is_(None), EpisodeRow.feedback_due_at <= now)
                .order_by(EpisodeRow.feedback_due_at)
                .limit(limit)
            )
            return list(s.scalars(stmt))

    def claim_learning(self, *, limit: int = 1000, now: datetime | None = None) -> list[LearningItem]:
        """Final rewards not yet learned from, marked learned in the same transaction so that no
        reward is ever learned twice, even with several workers (SKIP LOCKED on PostgreSQL)."""
        now = now or utcnow()
        with self._session() as s:
            stmt = (
                select(RewardRow)
                .where(RewardRow.final.is_(True), RewardRow.learned_at.is_(None))
                .order_by(RewardRow.computed_at)
                .limit(limit)
            )
            if is_postgres(self._engine):
                stmt = stmt.with_for_update(skip_locked=True)
            rewards = s.scalars(stmt).all()
            if not rewards:
                return []
            ids = [r.episode_id for r in rewards]
            selections = self._load_selections(s, ids)
            outcomes: dict[str, dict[str, float]] = defaultdict(dict)
            rows = s.execute(
                select(DecisionRow.episode_id, DecisionCandidateRow.candidate_id, DecisionCandidateRow.used)
                .join(DecisionRow, DecisionRow.id == DecisionCandidateRow.decision_id)
                .where(DecisionRow.episode_id.in_(ids), DecisionCandidateRow.used.is_not(None))
            ).all()
            for episode_id, candidate_id, used in rows:
                outcomes[episode_id][candidate_id] = 1.0 if used else 0.0
            s.execute(update(RewardRow).where(RewardRow.episode_id.in_(ids)).values(learned_at=now))
            return [
                LearningItem(r.episode_id, tuple(selections.get(r.episode_id, ())), cv.reward_from_row(r), outcomes[r.episode_id])
                for r in rewards
            ]

    def recompute_rewards(
        self,
        weights: RewardWeights,
        *,
        since: datetime | None = None,
        version: str | None = None,
        use_memory_scores: bool = False,
    ) -> int:
        """Re-total every stored reward under ``weights`` from its stored components; returns how
        many were updated. Nothing is re-run: the components are the record.

        ``use_memory_scores`` replaces Hm with the MemPO label (+1 / -1) of the episode's decision
        wherever one is stored (``memabra mempo score``)."""
        count = 0
        with self._session() as s:
            stmt = select(RewardRow).join(EpisodeRow, EpisodeRow.id == RewardRow.episode_id)
            if since is not None:
                stmt = stmt.where(EpisodeRow.created_at >= since)
            labels: dict[str, float] = {}
            if use_memory_scores:
                label_stmt = select(DecisionRow.episode_id, MemoryScoreRow.reward).join(
                    MemoryScoreRow, MemoryScoreRow.decision_id == DecisionRow.id
                )
                labels = {episode_id: float(reward) for episode_id, reward in s.execute(label_stmt)}
            updates_reward, updates_episode = [], []
            for row in s.scalars(stmt):
                stored = cv.reward_from_row(row)
                if row.episode_id in labels:
                    stored = RewardBreakdown(replace(stored.components, hm=labels[row.episode_id]), stored.weights, stored.version)
                breakdown = stored.reweighted(weights)
                total = breakdown.total
                updates_reward.append(
                    {
                        "b_id": row.episode_id,
                        "b_total": total,
                        "b_hm": breakdown.components.hm,
                        "b_weights": weights.as_dict(),
                        "b_version": version or row.reward_version,
                    }
                )
                updates_episode.append({"b_id": row.episode_id, "b_total": total})
                count += 1
            if updates_reward:
                rt = RewardRow.__table__
                s.execute(
                    update(rt)
                    .where(rt.c.episode_id == bindparam("b_id"))
                    .values(
                        total=bindparam("b_total"),
                        hm=bindparam("b_hm"),
                        weights=bindparam("b_weights"),
                        reward_version=bindparam("b_version"),
                    ),
                    updates_reward,
                )
                et = EpisodeRow.__table__
                s.execute(
                    update(et).where(et.c.id == bindparam("b_id")).values(reward_total=bindparam("b_total")),
                    updates_episode,
                )
        return count

    # ------------------------------------------------------------------ decisions for offline use

    def iter_selections(
        self, *, since: datetime | None = None, until: datetime | None = None, chunk_size: int = 1000
    ) -> Iterator[tuple[Selection, RewardBreakdown | None]]:
        """Every logged decision in time order with its episode's reward, read in chunks through
        a server-side cursor so memory stays flat however long the log is."""
        stmt = select(DecisionRow).order_by(DecisionRow.created_at, DecisionRow.id)
        if since is not None:
            stmt = stmt.where(DecisionRow.created_at >= since)
        if until is not None:
            stmt = stmt.where(DecisionRow.created_at < until)
        with Session(self._engine) as stream, Session(self._engine) as s:
            result = stream.scalars(stmt.execution_options(stream_results=True, yield_per=chunk_size))
            for chunk in result.partitions():
                assembled = self._assemble(s, chunk)
                episode_ids = list({d.episode_id for d in chunk})
                rewards = {
                    r.episode_id: cv.reward_from_row(r)
                    for r in s.scalars(select(RewardRow).where(RewardRow.episode_id.in_(episode_ids)))
                }
                by_id = {sel.id: sel for sels in assembled.values() for sel in sels}
                for d in chunk:
                    yield by_id[d.id], rewards.get(d.episode_id)
                s.expunge_all()

    def candidate_stats(self, user_id: str, candidate_ids: Sequence[str]) -> dict[str, CandidateStats]:
        """How often each candidate was offered to, chosen for, and used by this user."""
        if not candidate_ids:
            return {}
        t = DecisionCandidateRow
        with self._session() as s:
            rows = s.execute(
                select(
                    t.candidate_id,
                    func.count(),
                    func.sum(func.cast(t.chosen, _int_type())),
                    func.sum(func.cast(func.coalesce(t.used, False), _int_type())),
                )
                .where(t.user_id == user_id, t.candidate_id.in_(list(candidate_ids)))
                .group_by(t.candidate_id)
            ).all()
        return {cid: CandidateStats(int(n), int(ch or 0), int(u or 0)) for cid, n, ch, u in rows}

    # ------------------------------------------------------------------ policy snapshots

    def save_snapshot(self, snapshot: PolicySnapshot) -> None:
        with self._session() as s:
            if snapshot.parent is not None and s.get(PolicySnapshotRow, snapshot.parent) is None:
                raise InvalidRecordError(f"snapshot parent {snapshot.parent!r} is not in the log")
            if s.get(PolicySnapshotRow, snapshot.version) is not None:
                raise InvalidRecordError(f"a snapshot with version {snapshot.version!r} already exists")
            s.add(
                PolicySnapshotRow(
                    version=snapshot.version,
                    policy=snapshot.policy,
                    parent=snapshot.parent,
                    model=snapshot.model,
                    learner_args=cv._thaw(snapshot.learner_args),
                    metrics=cv._thaw(snapshot.metrics),
                    status=snapshot.status,
                    created_at=snapshot.created_at,
                )
            )
            if snapshot.status == "active":
                self._retire_others(s, snapshot.policy, snapshot.version)

    def get_snapshot(self, version: str) -> PolicySnapshot:
        with self._session() as s:
            row = s.get(PolicySnapshotRow, version)
            if row is None:
                raise UnknownEpisodeError(f"no policy snapshot with version {version!r}")
            return cv.snapshot_from_row(row)

    def latest_snapshot(self, policy: str | None = None, *, status: str | None = None) -> PolicySnapshot | None:
        stmt = select(PolicySnapshotRow).order_by(PolicySnapshotRow.created_at.desc(), PolicySnapshotRow.version.desc())
        if policy is not None:
            stmt = stmt.where(PolicySnapshotRow.policy == policy)
        if status is not None:
            stmt = stmt.where(PolicySnapshotRow.status == status)
        with self._session() as s:
            row = s.scalars(stmt.limit(1)).first()
            return cv.snapshot_from_row(row) if row is not None else None

    def list_snapshots(self, policy: str | None = None) -> list[PolicySnapshot]:
        stmt = select(PolicySnapshotRow).order_by(PolicySnapshotRow.created_at)
        if policy is not None:
            stmt = stmt.where(PolicySnapshotRow.policy == policy)
        with self._session() as s:
            return [cv.snapshot_from_row(r) for r in s.scalars(stmt)]

    def set_snapshot_status(self, version: str, status: str) -> None:
        """Promote (``active``: the previously active snapshot of the policy is retired) or retire."""
        if status not in ("candidate", "active", "retired"):
            raise InvalidRecordError(f"snapshot status must be candidate, active or retired, got {status!r}")
        with self._session() as s:
            row = s.get(PolicySnapshotRow, version)
            if row is None:
                raise UnknownEpisodeError(f"no policy snapshot with version {version!r}")
            row.status = status
            if status == "active":
                self._retire_others(s, row.policy, version)

    def update_snapshot_metrics(self, version: str, metrics: Mapping[str, Any]) -> None:
        with self._session() as s:
            row = s.get(PolicySnapshotRow, version)
            if row is None:
                raise UnknownEpisodeError(f"no policy snapshot with version {version!r}")
            row.metrics = {**(row.metrics or {}), **cv._thaw(metrics)}

    @staticmethod
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

    # ------------------------------------------------------------------ registry

    def put_items(self, items: Sequence[RegistryItem]) -> None:
        """Insert or replace memories, skills and tools (usage counters of a replaced row are kept)."""
        if not items:
            return
        with self._session() as s:
            for item in items:
                existing = s.get(RegistryRow, (item.kind.value, item.owner, item.id))
                values = cv.registry_values(item)
                if existing is None:
                    s.add(RegistryRow(**{("metadata_" if k == "metadata" else k): v for k, v in values.items()}))
                else:
                    for key in ("name", "text", "body", "tokens", "source", "updated_at"):
                        setattr(existing, key, values[key])
                    existing.metadata_ = values["metadata"]
                    existing.deleted_at = None

    def items(self, user_id: str, kind: CandidateKind | str | None = None) -> list[RegistryItem]:
        """The registry as one user sees it: their own rows plus shared skills and tools. Another
        user's memories are never returned."""
        if not user_id:
            raise InvalidRecordError("items() needs a user_id: the registry is scoped by user")
        stmt = select(RegistryRow).where(
            RegistryRow.deleted_at.is_(None),
            RegistryRow.retired_at.is_(None),  # superseded memories stay in history, out of recall
            or_(RegistryRow.owner == user_id, and_(RegistryRow.owner == "", RegistryRow.kind != CandidateKind.MEMORY.value)),
        )
        if kind is not None:
            stmt = stmt.where(RegistryRow.kind == CandidateKind(kind).value)
        with self._session() as s:
            return [cv.registry_from_row(r) for r in s.scalars(stmt.order_by(RegistryRow.kind, RegistryRow.created_at))]

    def delete_item(self, kind: CandidateKind | str, owner: str, item_id: str) -> bool:
        with self._session() as s:
            row = s.get(RegistryRow, (CandidateKind(kind).value, owner, item_id))
            if row is None or row.deleted_at is not None:
                return False
            row.deleted_at = utcnow()
            return True


def _int_type() -> Integer:
    return Integer()


def _encode_cursor(at: datetime, episode_id: str) -> str:
    raw = json.dumps([at.isoformat(), episode_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, episode_id = json.loads(base64.urlsafe_b64decode(padded))
        return datetime.fromisoformat(at), str(episode_id)
    except Exception:
        raise InvalidRecordError(f"not a valid page cursor: {cursor!r}") from None


__all__ = ["DEFAULT_FEEDBACK_WINDOW", "CandidateStats", "EpisodeFilter", "EpisodeLog"]

