""":class:`~memabra.storage.EpisodeLog`'s deletions: retention, erasure and their audit trail
(the bodies live in :mod:`memabra.storage._retention` and :mod:`memabra.storage._deletion_log`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from memabra.storage import _deletion_log, _episodes, _learner_claims, _retention
from memabra.storage._deletion_log import DeletionEntry
from memabra.storage._learner_claims import RetentionHold
from memabra.storage._retention import EpisodeDeletion, UserErasure
from memabra.storage._tx import Transactions

__all__ = ["RetentionMethods"]


class RetentionMethods:
    """Mixed into :class:`~memabra.storage.EpisodeLog`, which supplies the transactions."""

    _tx: Transactions

    def delete_episodes(
        self,
        episode_ids: Sequence[str] | None = None,
        *,
        user_id: str | None = None,
        before: datetime | None = None,
        include_unlearned: bool = False,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
        actor: str = "library",
        client: str | None = None,
    ) -> EpisodeDeletion:
        """Retention and erasure: delete the episodes matching every filter given (ids, a user,
        created before a time), with all that was logged under them, in chunks of one transaction
        each. Episodes whose reward a learner has not read yet are kept (and counted) unless
        ``include_unlearned``. Each run (not a dry run) leaves an entry naming ``actor`` and
        ``client`` in :meth:`deletion_history`. See :mod:`memabra.storage._retention`."""
        return _retention.delete_episodes(
            self._tx,
            episode_ids=episode_ids,
            user_id=user_id,
            before=before,
            include_unlearned=include_unlearned,
            dry_run=dry_run,
            progress=progress,
            actor=actor,
            client=client,
        )

    def erase_user(
        self,
        user_id: str,
        forget_memories: Callable[[], int],
        *,
        forget_threads: Callable[[], int] | None = None,
        actor: str = "library",
        client: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> UserErasure:
        """Run ``forget_threads``, delete every episode of ``user_id`` (learned or not), then run
        ``forget_memories``, as one audited run (:func:`memabra.erase_user` is the front door,
        with a memory backend and a checkpointer)."""
        return _retention.erase_user(
            self._tx,
            user_id,
            forget_memories,
            forget_threads=forget_threads,
            actor=actor,
            client=client,
            progress=progress,
        )

    def user_threads(self, user_id: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The conversation threads of ``user_id``'s episodes: (those no other user's episode
        names, those that other users' episodes name too)."""
        return _episodes.user_threads(self._tx, user_id)

    def unfinished_deletions(self) -> tuple[DeletionEntry, ...]:
        """Deletion runs with no finish that no later finished run covers (what
        :meth:`status` reports as ``unfinished_deletions``)."""
        with self._tx.read() as s:
            return _deletion_log.unfinished_deletions(s)

    def deletion_history(
        self, *, limit: int = 50, after: str | None = None, user_id: str | None = None
    ) -> list[DeletionEntry]:
        """The deletion audit trail, newest first: ``limit`` entries, those listed after the entry
        ``after`` (keyset paging: pass the last id of a page), those of runs given ``user_id``."""
        return _deletion_log.deletion_history(self._tx, limit=limit, after=after, user_id=user_id)

    def retention_holds(self) -> list[RetentionHold]:
        """The learner checkpoints retention waits for (one per policy learned from this log), each
        with the final rewards it has yet to read: :meth:`delete_episodes` keeps those."""
        return _learner_claims.retention_holds(self._tx)

    def forget_learner(self, policy: str) -> bool:
        """Delete ``policy``'s learner checkpoint (a policy no longer learned), so retention stops
        keeping rewards for it; its snapshots stay. ``False`` when it had none;
        :class:`~memabra.storage.LearnerBusyError` while a learner holds its lease."""
        return _learner_claims.forget_learner(self._tx, policy)
