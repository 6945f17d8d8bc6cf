"""Episodes: bulk logging, reading one back, and the keyset-paginated listing.

An episode, its decisions, every offered candidate, the slot distributions, its steps, feedback
and reward land in one transaction or not at all. Bulk writes use one ``COPY`` (PostgreSQL) or one
``executemany`` (SQLite) per table, so 1,000 decisions of 20 candidates cost a handful of round
trips. Registry usage counters are bumped in one statement per batch, in a fixed (kind, owner, id)
order, so concurrent batches lock the same rows in the same order and cannot deadlock.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Label, Row, bindparam, func, select, update
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError, UnknownEpisodeError
from memabra._records import CandidateKind, Episode, Selection
from memabra.storage import _convert as cv
from memabra.storage import _suspended_turns
from memabra.storage._clock import host_offset
from memabra.storage._injected_bodies import episode_bodies
from memabra.storage._models import (
    Base,
    DecisionCandidateRow,
    DecisionRow,
    DecisionSlotRow,
    EpisodeRow,
    FeedbackRow,
    RegistryRow,
    RewardRow,
    StepRow,
    SuspendedTurnRow,
    table_of,
)
from memabra.storage._rows import clean_text, insert_batches
from memabra.storage._suspended_turns import PAUSES_KEY, SuspendedTurn
from memabra.storage._tx import Transactions, is_duplicate_key

__all__ = [
    "EpisodeFilter",
    "assemble_selections",
    "count_episodes",
    "get_episode",
    "injected_bodies",
    "get_selection",
    "load_episode",
    "load_selections",
    "log_episodes",
    "resolve_episode_id",
    "user_threads",
]

MIN_ID_PREFIX = 4
"""Shortest id prefix ``resolve_episode_id`` looks up: shorter ones name too many episodes to be
worth a scan of the ids (git's rule for abbreviated hashes)."""

_PREFIX_MATCHES_SHOWN = 5

# Thread ids per IN (...) list, under SQLite's limit on bound parameters.
_THREAD_BATCH = 500


@dataclass(frozen=True, slots=True)
class EpisodeFilter:
    """Filters of an episode listing; every field is optional and they combine with AND.

    ``query_contains`` keeps episodes whose query holds that text, ignoring case (on SQLite, the
    case of ASCII letters only); ``%`` and ``_`` in it are plain characters. ``snapshot`` keeps the
    episodes a saved snapshot served: its own version and the online updates that grew from it
    (:func:`~memabra.storage.snapshot_group`, the rule the policies page counts by), where
    ``policy_version`` matches one version exactly. ``failed`` keeps the episodes logged as
    failed turns (``True``: an exception ended them or a new message superseded them) or the others
    (``False``); ``failure_cause`` keeps the failed ones of one cause, one of
    :data:`~memabra.storage._failures.FAILURE_CAUSES` (``recursion_limit``, ``model_error``,
    ``tool_error``, ``superseded``), and implies ``failed``."""

    user_id: str | None = None
    thread_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    policy_version: str | None = None
    snapshot: str | None = None
    kind: CandidateKind | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    corrected: bool | None = None
    query_contains: str | None = None
    failed: bool | None = None
    failure_cause: str | None = None


def log_episodes(
    tx: Transactions,
    episodes: Sequence[Episode],
    feedback_window: timedelta,
    *,
    replacing: Sequence[SuspendedTurn] = (),
) -> None:
    """Write many episodes in one transaction. ``replacing``: copies of these episodes' turns as
    the caller read them; each is deleted only where the log still holds it so, else
    :class:`~memabra.storage._suspended_turns.TurnWentOnError` and nothing is written
    (:func:`~memabra.storage._suspended_turns.discard_replaced`)."""
    if not episodes:
        return
    ids = [e.id for e in episodes]
    if len(set(ids)) != len(ids):
        raise InvalidRecordError("log_episodes got the same episode id twice")
    _check_replaced(ids, replacing)
    episode_rows: list[dict[str, Any]] = []
    decision_rows: list[dict[str, Any]] = []
    slot_rows: list[dict[str, Any]] = []
    candidate_rows: list[dict[str, Any]] = []
    step_rows: list[dict[str, Any]] = []
    feedback_rows: list[dict[str, Any]] = []
    reward_rows: list[dict[str, Any]] = []
    chosen_counts: Counter[tuple[str, str, str]] = Counter()
    # the chosen candidates the episode already knows were used, counted as set_used counts a later
    # report (once per decision that chose them); without this the runtime's counter, whose uses
    # arrive with the episode, stayed at 0
    used_counts: Counter[tuple[str, str, str]] = Counter()
    last_chosen: dict[tuple[str, str, str], datetime] = {}
    for episode in episodes:
        episode_rows.append(cv.episode_values(episode, episode.created_at + feedback_window))
        for seq, sel in enumerate(episode.selections):
            decision_rows.append(cv.decision_values(episode, seq, sel))
            slot_rows.extend(cv.slot_values(sel))
            candidate_rows.extend(cv.candidate_values(sel, episode.used_ids))
            for cand in sel.chosen:
                key = (
                    cand.kind.value,
                    clean_text(str(cand.metadata.get("owner", sel.context.user_id))),
                    clean_text(cand.id),
                )
                chosen_counts[key] += 1
                if episode.used_ids and cand.id in episode.used_ids:
                    used_counts[key] += 1
                last_chosen[key] = max(last_chosen.get(key, sel.created_at), sel.created_at)
        step_rows.extend(cv.step_values(episode.id, episode.steps))
        feedback_rows.extend(cv.feedback_values(f, late=False) for f in episode.feedback)
        if episode.reward is not None:
            final = episode.finalized_at is not None
            reward_rows.append(cv.reward_values(episode.id, episode.reward, final=final, at=episode.created_at))
    # Fixed order: two batches touching the same registry rows lock them in the same sequence.
    counter_params = [
        {
            "b_kind": k,
            "b_owner": o,
            "b_id": i,
            "b_n": n,
            "b_used": used_counts[(k, o, i)],
            "b_at": last_chosen[(k, o, i)],
        }
        for (k, o, i), n in sorted(chosen_counts.items())
    ]

    # only a turn the runtime kept in the log has a copy to delete: the others cost no statement
    replaced = {t.episode_id for t in replacing}
    paused = [e.id for e in episodes if PAUSES_KEY in e.metadata or e.id in replaced]

    def write(conn: Connection) -> None:
        if paused:  # before any write: a copy's upsert racing this transaction sees its commit
            _suspended_turns.lock_episodes(conn, paused)
        # the deadlines on the database's clock: another host, its clock apart, judges them
        offset = host_offset(conn)
        deadlines = [{**r, "feedback_due_at": r["feedback_due_at"] + offset} for r in episode_rows] if offset else None
        insert_batches(
            conn,
            [
                (table_of(EpisodeRow), deadlines or episode_rows),
                (table_of(DecisionRow), decision_rows),
                (table_of(DecisionSlotRow), slot_rows),
                (table_of(DecisionCandidateRow), candidate_rows),
                (table_of(StepRow), step_rows),
                (table_of(FeedbackRow), feedback_rows),
                (table_of(RewardRow), reward_rows),
            ],
        )
        if replacing:  # the guard first: a copy that went on aborts the batch before any other delete
            _suspended_turns.discard_replaced(conn, replacing)
        if paused:
            _suspended_turns.discard_logged(conn, paused)
        if counter_params:
            registry = table_of(RegistryRow)
            conn.execute(
                update(registry)
                .where(
                    registry.c.kind == bindparam("b_kind"),
                    registry.c.owner == bindparam("b_owner"),
                    registry.c.id == bindparam("b_id"),
                )
                .values(
                    times_chosen=registry.c.times_chosen + bindparam("b_n"),
                    times_used=registry.c.times_used + bindparam("b_used"),
                    last_chosen_at=bindparam("b_at"),
                ),
                counter_params,
            )

    try:
        tx.write_connection(write, what="log_episodes")
    except Exception as exc:
        if is_duplicate_key(exc):
            first_line = str(exc).splitlines()[0]
            raise InvalidRecordError(
                f"log_episodes: an id in this batch is already in the log, nothing was written ({first_line})"
            ) from exc
        raise


def _check_replaced(ids: Sequence[str], replacing: Sequence[SuspendedTurn]) -> None:
    logged = set(ids)
    for turn in replacing:
        if turn.episode_id not in logged:
            raise InvalidRecordError(
                f"log_episodes: the copy of turn {turn.turn_id!r} it replaces is of episode {turn.episode_id!r}, "
                "which is not in this batch"
            )
        if turn.suspended_at.tzinfo is None:
            raise InvalidRecordError(
                "the replaced SuspendedTurn's suspended_at must be timezone-aware, as read from the log"
            )
    if len({t.turn_id for t in replacing}) != len(replacing):
        raise InvalidRecordError("log_episodes got two copies of the same turn to replace")


def load_episode(s: Session, episode_id: str, *, lock: bool = False) -> Episode:
    """The episode record, read inside an open session (``lock``: FOR UPDATE on PostgreSQL)."""
    row = s.get(EpisodeRow, episode_id, with_for_update=lock or None)
    if row is None:
        raise UnknownEpisodeError(f"no episode with id {episode_id!r}")
    selections = load_selections(s, [episode_id]).get(episode_id, ())
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


def get_episode(tx: Transactions, episode_id: str) -> Episode:
    with tx.read() as s:
        return load_episode(s, clean_text(episode_id))


def injected_bodies(tx: Transactions, episode: Episode) -> dict[str, str]:
    """What ``episode``'s chosen skills and tools injected: kept body by digest
    (:mod:`~memabra.storage._injected_bodies`)."""
    with tx.read() as s:
        return episode_bodies(s, episode)


def resolve_episode_id(tx: Transactions, ref: str) -> str:
    """The id of the episode ``ref`` names: its whole id, or the start of exactly one id (at least
    ``MIN_ID_PREFIX`` characters), as ``episodes list`` prints them. Raises
    :class:`UnknownEpisodeError` naming the matches when the start fits several."""
    ref = clean_text(ref)
    with tx.read() as s:
        if s.get(EpisodeRow, ref) is not None:
            return ref
        if len(ref) < MIN_ID_PREFIX:
            raise UnknownEpisodeError(
                f"no episode with id {ref!r} (the start of an id names it from {MIN_ID_PREFIX} characters on)"
            )
        # substr, not LIKE: SQLite's LIKE ignores case and both would need "%" and "_" escaped.
        matches = list(
            s.scalars(
                select(EpisodeRow.id)
                .where(func.substr(EpisodeRow.id, 1, len(ref)) == ref)
                .order_by(EpisodeRow.id)
                .limit(_PREFIX_MATCHES_SHOWN + 1)
            )
        )
    if not matches:
        raise UnknownEpisodeError(f"no episode with id {ref!r} or an id starting with it")
    if len(matches) > 1:
        shown = ", ".join(matches[:_PREFIX_MATCHES_SHOWN])
        more = " and more" if len(matches) > _PREFIX_MATCHES_SHOWN else ""
        raise UnknownEpisodeError(f"{ref!r} is the start of several episode ids ({shown}{more}); give more of it")
    return matches[0]


def _attribute_columns(model: type[Base]) -> tuple[Label[Any], ...]:
    """``model``'s columns, each labelled with its mapped attribute's name (``metadata_`` for the
    ``metadata`` column): a plain row then reads as the ORM object does."""
    return tuple(column.label(name) for name, column in model.__mapper__.columns.items())


_ATTRIBUTE_COLUMNS = {model: _attribute_columns(model) for model in (DecisionSlotRow, DecisionCandidateRow)}


def load_selections(s: Session, episode_ids: Sequence[str]) -> dict[str, list[Selection]]:
    decisions = s.scalars(
        select(DecisionRow).where(DecisionRow.episode_id.in_(episode_ids)).order_by(DecisionRow.seq)
    ).all()
    return assemble_selections(s, decisions)


def assemble_selections(s: Session, decisions: Sequence[DecisionRow]) -> dict[str, list[Selection]]:
    """Selections of the given decision rows, grouped by episode id, in the rows' order; a decision
    whose rows a concurrent deletion removed since it was read is left out."""
    if not decisions:
        return {}
    ids = [d.id for d in decisions]
    # plain rows named as the mapped attributes, not ORM objects: a decision has a row per
    # candidate, and building, tracking and reading an ORM object per row cost more than the query
    slots: dict[str, list[Row[Any]]] = defaultdict(list)
    for row in s.execute(select(*_ATTRIBUTE_COLUMNS[DecisionSlotRow]).where(DecisionSlotRow.decision_id.in_(ids))):
        slots[row.decision_id].append(row)
    cands: dict[str, list[Row[Any]]] = defaultdict(list)
    for crow in s.execute(
        select(*_ATTRIBUTE_COLUMNS[DecisionCandidateRow]).where(DecisionCandidateRow.decision_id.in_(ids))
    ):
        cands[crow.decision_id].append(crow)
    out: dict[str, list[Selection]] = defaultdict(list)
    for d in decisions:
        if not cands[d.id]:
            # every logged decision offers a candidate: none here means the episode was deleted
            # (episodes delete) after its decision row was read; it is left out, not half-built
            continue
        out[d.episode_id].append(cv.selection_from_rows(d, slots[d.id], cands[d.id]))
    return out


def get_selection(tx: Transactions, decision_id: str) -> Selection:
    with tx.read() as s:
        row = s.get(DecisionRow, clean_text(decision_id))
        if row is None:
            raise UnknownEpisodeError(f"no routing decision with id {decision_id!r}")
        found = assemble_selections(s, [row]).get(row.episode_id)
        if not found:
            raise UnknownEpisodeError(f"no routing decision with id {decision_id!r} (its episode was just deleted)")
        return found[0]


def count_episodes(tx: Transactions) -> int:
    with tx.read() as s:
        return int(s.scalar(select(func.count()).select_from(EpisodeRow)) or 0)


def user_threads(tx: Transactions, user_id: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The thread ids of ``user_id``'s episodes and paused turns: (those only this user's name,
    those that other users' episodes or paused turns name too), each sorted."""
    user = clean_text(user_id)
    with tx.read() as s:
        threads: set[str] = set(
            s.scalars(
                select(EpisodeRow.thread_id)
                .where(EpisodeRow.user_id == user, EpisodeRow.thread_id.is_not(None))
                .distinct()
            )
        )
        # a thread whose first turn is paused by an interrupt has no episode yet
        threads.update(
            t
            for t in s.scalars(select(SuspendedTurnRow.thread_id).where(SuspendedTurnRow.user_id == user))
            if t is not None
        )
        shared: set[str | None] = set()
        listed = sorted(threads)
        for i in range(0, len(listed), _THREAD_BATCH):
            batch = listed[i : i + _THREAD_BATCH]
            shared.update(
                s.scalars(
                    select(EpisodeRow.thread_id)
                    .where(EpisodeRow.thread_id.in_(batch), EpisodeRow.user_id != user)
                    .distinct()
                )
            )
            # another user's turn paused in the thread lives in its checkpoints until resumed
            shared.update(
                s.scalars(
                    select(SuspendedTurnRow.thread_id)
                    .where(SuspendedTurnRow.thread_id.in_(batch), SuspendedTurnRow.user_id != user)
                    .distinct()
                )
            )
    return tuple(sorted(threads - shared)), tuple(sorted(t for t in shared if t is not None))
