"""Deleting episodes: a retention window (everything logged before a date) and erasure (one user's
episodes, or named ones; :func:`erase_user` takes the user's memories too).

An episode goes with everything logged under it (decisions, offered candidates, slot
distributions, steps, feedback, its reward, MemPO labels), through the schema's ``ON DELETE
CASCADE``. What the log learned or summarised from it stays: policy snapshots, stored OPE results,
memory histories (they name the episode by id, not by key), the registry's usage counters.

Deletion runs in chunks, one transaction each, so serving processes writing to the same log wait
for one chunk at most; a chunk goes whole or not at all, so a run that dies half way leaves whole
episodes, and running it again finishes the job.

Episodes whose reward a learner has yet to read are kept unless asked otherwise: a reward not
final yet (its feedback window is open), or final but not yet read by every learner: no learner
has read it (``rewards.learned_at``, set by the first learner's commit or a claim), or the
checkpoint of some policy's learner (``learner_state``) stands before it in the commit order
(:mod:`memabra.storage._learner_claims`). Deleting those loses what a learner would have learned
from them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, exists, func, not_, or_, select, true
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError, UnknownEpisodeError
from memabra._records import MAX_ID_LENGTH
from memabra.storage import _deletion_log, _memories, _suspended_turns
from memabra.storage._deletion_log import add_deleted, finish_deletion, start_deletion
from memabra.storage._episodes import resolve_episode_id
from memabra.storage._learner_claims import behind_a_learner
from memabra.storage._models import EpisodeRow, RewardRow
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = ["DELETE_CHUNK", "EpisodeDeletion", "UserErasure", "delete_episodes", "erase_user"]

logger = logging.getLogger("memabra")

# Episodes per transaction. A multi-turn bench episode carries about 130 candidate rows, so a chunk
# is some 25,000 rows: long enough to amortise a commit, short enough that a serving process
# waiting on SQLite's write lock waits well under a second.
DELETE_CHUNK = 200

# Ids per IN (...) list, under SQLite's limit on bound parameters.
_ID_BATCH = 500


@dataclass(frozen=True, slots=True)
class UserErasure:
    """What :func:`erase_user` did: the user's episodes deleted, their memories forgotten, the
    run's entry in the deletion audit trail, the conversation threads deleted from the agent's
    checkpointer (``None``: none was given), the unfinished turns deleted (paused, or routed
    and not yet logged), the user's own skills and tools deleted from the registry, and
    ``resumed``, the audit ids of earlier erasures of the user that died part way and this run
    finished."""

    episodes: int
    memories: int
    audit_id: str
    threads: int | None = None
    paused: int = 0
    items: int = 0
    resumed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EpisodeDeletion:
    """What one deletion did (with ``dry_run``: would do).

    ``deleted``: episodes deleted. ``kept_open``: matching episodes kept because their reward is
    not final yet; ``kept_unlearned``: kept because some learner has not read their final reward yet.
    Both are 0 with ``include_unlearned``. ``audit_id``: the run's entry in the deletion audit
    trail (``None`` for a dry run, which leaves none)."""

    deleted: int
    kept_open: int
    kept_unlearned: int
    dry_run: bool
    audit_id: str | None = None

    @property
    def kept(self) -> int:
        return self.kept_open + self.kept_unlearned


def delete_episodes(
    tx: Transactions,
    *,
    episode_ids: Sequence[str] | None = None,
    user_id: str | None = None,
    before: datetime | None = None,
    include_unlearned: bool = False,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    actor: str = "library",
    client: str | None = None,
) -> EpisodeDeletion:
    """Delete the episodes that match every filter given (at least one is required): the ids in
    ``episode_ids``, the episodes of ``user_id``, those created before ``before`` (timezone-aware).

    An id in ``episode_ids`` the log does not hold raises :class:`UnknownEpisodeError` naming it,
    before anything is deleted. ``progress(deleted_so_far)`` is called after each committed chunk.
    The run is recorded in the deletion audit trail (:mod:`memabra.storage._deletion_log`) under
    ``actor`` (who asked) and ``client`` (from where).
    """
    if episode_ids is None and user_id is None and before is None:
        raise InvalidRecordError("delete_episodes needs episode_ids, user_id or before; it never deletes the whole log")
    _check_actor(actor)
    if user_id is not None:
        _check_user(user_id)
    if before is not None and before.tzinfo is None:
        raise InvalidRecordError(f"before must be timezone-aware, got the naive datetime {before.isoformat()}")
    ids = None if episode_ids is None else sorted({clean_text(i) for i in episode_ids})
    if ids is not None and not ids:
        raise InvalidRecordError("episode_ids is empty: name at least one episode")
    # named ids go _ID_BATCH at a time, so no statement outgrows SQLite's bound-parameter limit
    groups = [None] if ids is None else [ids[i : i + _ID_BATCH] for i in range(0, len(ids), _ID_BATCH)]
    if ids is not None:
        _check_known(tx, ids, groups)
    kept_open = kept_unlearned = 0
    deletable: list[ColumnElement[bool]] = []
    with tx.read() as s:
        for group in groups:
            where = _matching(group, user_id, before)
            deletable.append(where if include_unlearned else and_(where, not_(_awaiting_learner())))
            if not include_unlearned:
                kept_open += _count(s, where, _reward_open())
                kept_unlearned += _count(s, where, _reward_unlearned())
        if dry_run:
            would = sum(_count(s, cond) for cond in deletable)
            return EpisodeDeletion(would, kept_open, kept_unlearned, dry_run=True)
    audit_id = start_deletion(
        tx,
        actor=actor,
        client=client,
        episode_ids=ids,
        user_id=user_id,
        created_before=before,
        include_unlearned=include_unlearned,
        kept=kept_open + kept_unlearned,
    )
    deleted = _delete_matching(tx, deletable, audit_id, progress)
    finish_deletion(tx, audit_id)
    logger.info(
        "deleted %d episode(s) (ids: %s, user: %r, before: %s); kept %d a learner has not read",
        deleted,
        "any" if ids is None else f"{len(ids)} named",
        user_id,
        None if before is None else before.isoformat(),
        kept_open + kept_unlearned,
    )
    return EpisodeDeletion(deleted, kept_open, kept_unlearned, dry_run=False, audit_id=audit_id)


def erase_user(
    tx: Transactions,
    user_id: str,
    forget_memories: Callable[[], int],
    *,
    forget_threads: Callable[[], int] | None = None,
    actor: str = "library",
    client: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> UserErasure:
    """Erase a user: call ``forget_threads`` (the checkpointer's threads; it reads their ids from
    the user's episodes, so it runs while they are still here), delete every episode of
    ``user_id`` (rewards a learner has not read too; first the stored embeddings of the memory
    texts they were offered, and the user's own skills and tools), then call ``forget_memories`` (the memory
    backend's own deletion). Each callback returns how many it removed. One entry of the audit
    trail is marked finished only after all three; a run that dies part way leaves it unfinished,
    and erasing again finishes the job."""
    _check_actor(actor)
    _check_user(user_id)
    # read before this run's entry exists: once it finishes, it covers them and they drop out
    with tx.read() as s:
        resumed = tuple(
            e.id for e in _deletion_log.unfinished_deletions(s) if e.erasure and e.user_id == clean_text(user_id)
        )
    audit_id = start_deletion(
        tx,
        actor=actor,
        client=client,
        episode_ids=None,
        user_id=user_id,
        created_before=None,
        include_unlearned=True,
        kept=0,
        erasure=True,
        threads=forget_threads is not None,
    )
    threads = forget_threads() if forget_threads is not None else None
    # before the episodes: their offered memory texts name the embeddings to delete
    items = tx.write(lambda s: _memories.erase_owned(s, user_id), what="erase_user")
    deleted = _delete_matching(tx, [_matching(None, user_id, None)], audit_id, progress, until_none_left=True)
    paused = tx.write(lambda s: _suspended_turns.erase_user(s, user_id), what="erase_user")
    memories = forget_memories()
    finish_deletion(tx, audit_id, memories_forgotten=memories, threads_deleted=threads)
    logger.info(
        "erased user %r: %d episode(s), %d unfinished turn(s), %d memories, %d own skill(s)/tool(s), threads: %s",
        user_id,
        deleted,
        paused,
        memories,
        items,
        threads,
    )
    return UserErasure(deleted, memories, audit_id, threads, paused, items, resumed)


def _check_actor(actor: str) -> None:
    if not actor.strip():
        raise InvalidRecordError("actor is empty: name who asked for the deletion (the audit trail records it)")


def _check_user(user_id: str) -> None:
    if not user_id.strip():
        raise InvalidRecordError("user_id is empty: name the user whose episodes to delete")
    if len(user_id) > MAX_ID_LENGTH:  # no episode holds such an id, and the audit trail's column refuses it
        raise InvalidRecordError(
            f"user_id holds at most {MAX_ID_LENGTH} characters, got {len(user_id)} ({user_id[:40]!r}...); "
            "nothing was deleted"
        )


def _delete_matching(
    tx: Transactions,
    deletable: Sequence[ColumnElement[bool]],
    audit_id: str,
    progress: Callable[[int], None] | None,
    *,
    until_none_left: bool = False,
) -> int:
    """Delete in chunks until nothing matches; each chunk counted in the audit entry ``audit_id``.

    Each chunk starts after the last episode the previous one selected, in ``(created_at, id)``
    order (keyset paging): an episode kept for a learner, or dead rows a PostgreSQL index still
    lists, are passed once per run, not once per chunk (re-reading from the start made a run over
    a log with many kept episodes quadratic in its size). An episode logged during the walk with
    an earlier ``created_at`` (a paused turn resumed: it keeps the time it was routed) lies behind
    it; ``until_none_left`` (an erasure, which keeps nothing) walks again from the start until a
    walk deletes nothing, one empty select when no such episode came."""
    deleted = 0
    for cond in deletable:
        while True:
            walked = 0
            after: _Key | None = None
            while True:
                chunk = functools.partial(_delete_chunk, deletable=cond, audit_id=audit_id, after=after)
                selected, n, after = tx.write(chunk, what="delete_episodes")
                if selected == 0:
                    break
                walked += n
                if progress is not None:
                    progress(deleted + walked)
            deleted += walked
            if not until_none_left or walked == 0:
                break
    return deleted


def _check_known(tx: Transactions, ids: Sequence[str], groups: Sequence[Sequence[str] | None]) -> None:
    found: set[str] = set()
    with tx.read() as s:
        for group in groups:
            found.update(s.scalars(select(EpisodeRow.id).where(_matching(group, None, None))))
    missing = [i for i in ids if i not in found]
    if missing:
        shown = ", ".join(repr(i) for i in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise UnknownEpisodeError(
            f"no episode with id {shown}{more}; nothing was deleted{_prefix_hint(tx, missing[0])}"
        )


def _prefix_hint(tx: Transactions, ref: str) -> str:
    """Deletion takes whole ids only (a prefix that later names a second episode must not widen
    what a saved command deletes), but a prefix deserves a pointer to the id it starts."""
    try:
        whole = resolve_episode_id(tx, ref)
    except UnknownEpisodeError:
        return ""
    return f" ({ref!r} is the start of {whole!r}; deleting takes whole ids)"


def _matching(ids: Sequence[str] | None, user_id: str | None, before: datetime | None) -> ColumnElement[bool]:
    conds: list[ColumnElement[bool]] = []
    if ids is not None:
        conds.append(EpisodeRow.id.in_(ids))
    if user_id is not None:
        conds.append(EpisodeRow.user_id == clean_text(user_id))
    if before is not None:
        conds.append(EpisodeRow.created_at < before)
    return and_(*conds)


def _reward_open() -> ColumnElement[bool]:
    return exists().where(RewardRow.episode_id == EpisodeRow.id, RewardRow.final.is_(False))


def _unread() -> ColumnElement[bool]:
    """A final reward some learner has yet to read: none has (``learned_at``), or a learner
    checkpoint stands before it (another policy's learner read it first)."""
    return or_(RewardRow.learned_at.is_(None), behind_a_learner())


def _reward_unlearned() -> ColumnElement[bool]:
    return exists().where(RewardRow.episode_id == EpisodeRow.id, RewardRow.final.is_(True), _unread())


def _awaiting_learner() -> ColumnElement[bool]:
    return exists().where(RewardRow.episode_id == EpisodeRow.id, or_(RewardRow.final.is_(False), _unread()))


def _count(s: Session, *conds: ColumnElement[bool]) -> int:
    return int(s.scalar(select(func.count()).select_from(EpisodeRow).where(*conds)) or 0)


# An episode's place in the order a deletion run walks: (created_at, id).
_Key = tuple[datetime, str]


def _after(key: _Key | None) -> ColumnElement[bool]:
    """Episodes after ``key`` in ``(created_at, id)`` order, written so that an index leading with
    ``created_at`` (or with ``user_id, created_at``) gives the range."""
    if key is None:
        return true()
    at, last = key
    return and_(EpisodeRow.created_at >= at, or_(EpisodeRow.created_at > at, EpisodeRow.id > last))


def _delete_chunk(
    s: Session, deletable: ColumnElement[bool], audit_id: str, after: _Key | None
) -> tuple[int, int, _Key | None]:
    """(episodes selected, episodes deleted, the last one's key): the filter is applied again by
    the DELETE itself, so an episode whose reward changed since the SELECT is judged on what the
    DELETE sees. The audit entry counts the chunk in the same transaction."""
    rows = s.execute(
        select(EpisodeRow.created_at, EpisodeRow.id)
        .where(deletable, _after(after))
        .order_by(EpisodeRow.created_at, EpisodeRow.id)
        .limit(DELETE_CHUNK)
    ).all()
    if not rows:
        return 0, 0, after
    ids = [eid for _, eid in rows]
    result = s.execute(delete(EpisodeRow).where(EpisodeRow.id.in_(ids), deletable))
    n = int(getattr(result, "rowcount", 0) or 0)
    if n:
        add_deleted(s, audit_id, n)
    last_at, last_id = rows[-1]
    return len(ids), n, (last_at, last_id)
