"""Erasing a user: every trace memabra and the agent keep of them, as one audited run.

In order: the conversation threads of their episodes in the agent's checkpointer (when one is
given: they hold every message of those conversations; their ids are read from the episodes, so
this goes first), every episode the log holds of them (rewards a learner has not read too: an
erasure cannot wait for learning), then every memory with its history, through the memory backend
that holds them. Before the episodes go, the stored embeddings of the memory texts they were
offered (a memory deleted from its store behind memabra's back is known only from there) and
the user's own skills and tools (registered with their id as owner). A thread that another
user's episodes name too is left in place and reported.
The run's entry in the deletion audit trail (``memabra episodes deletions``) records the counts
and is marked finished only after all of it; a run that dies part way stays unfinished, ``memabra
status`` names it, and erasing again finishes the job. What was learned from the user stays:
policy weights hold hashed features, not text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from langgraph.checkpoint.base import BaseCheckpointSaver

from memabra._errors import InvalidRecordError
from memabra._memory import MemoryBackend
from memabra._memory_records import storable_user
from memabra.storage import EpisodeLog

__all__ = ["Erasure", "erase_user"]

logger = logging.getLogger("memabra")


@dataclass(frozen=True, slots=True)
class Erasure:
    """What :func:`erase_user` removed: ``episodes`` deleted, ``memories`` forgotten, ``threads``
    deleted from the checkpointer (``None``: none was given), ``shared_threads`` left in place
    because other users' episodes name them too, ``audit_id``, the run's audit entry, and
    ``paused``, the turns an interrupt paused that were deleted unresumed, ``items``, the user's
    own skills and tools (registered with their id as owner) deleted from the registry, and
    ``resumed``, the audit ids of earlier erasures of the user that died part way and this run
    finished."""

    episodes: int
    memories: int
    threads: int | None
    shared_threads: tuple[str, ...]
    audit_id: str
    paused: int = 0
    items: int = 0
    resumed: tuple[str, ...] = ()

    @property
    def found_nothing(self) -> bool:
        """Whether the run found nothing of the user (already erased, or an id never seen)."""
        return not (self.episodes or self.memories or self.threads or self.shared_threads or self.paused or self.items)


def erase_user(
    log: EpisodeLog,
    user_id: str,
    *,
    memory: MemoryBackend | None = None,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    actor: str = "library",
    client: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Erasure:
    """Erase ``user_id``: their threads in ``checkpointer`` (if given), their episodes in ``log``,
    their memories in ``memory`` (default: the log's own memory table, :class:`~memabra.SQLMemory`),
    recorded in the deletion audit trail under ``actor`` (who asked) and ``client`` (from where).
    ``progress(episodes_deleted_so_far)`` is called after each committed chunk. A checkpointer
    that cannot delete threads is refused before anything is deleted, and so is a ``user_id`` the
    log would store as another user's (a NUL byte or a lone surrogate in it: ``"a\\x00nn"`` is
    ``"ann"`` there), which would erase that other user."""
    storable_user(user_id)
    if checkpointer is not None and type(checkpointer).delete_thread is BaseCheckpointSaver.delete_thread:
        raise InvalidRecordError(
            f"the checkpointer {type(checkpointer).__name__} cannot delete threads (no delete_thread); nothing was erased"
        )
    if memory is None:
        from memabra._sql_memory import SQLMemory

        memory = SQLMemory(log)
    backend = memory
    shared: list[str] = []

    def forget_threads() -> int:
        assert checkpointer is not None
        own, others = log.user_threads(user_id)
        for thread_id in own:
            checkpointer.delete_thread(thread_id)
        if others:
            logger.warning(
                "erasing user %s: %d thread(s) kept in the checkpointer, other users' episodes name them too: %s",
                user_id,
                len(others),
                ", ".join(others),
            )
        shared.extend(others)
        return len(own)

    result = log.erase_user(
        user_id,
        lambda: backend.forget_all(user_id),
        forget_threads=forget_threads if checkpointer is not None else None,
        actor=actor,
        client=client,
        progress=progress,
    )
    return Erasure(
        result.episodes,
        result.memories,
        result.threads,
        tuple(shared),
        result.audit_id,
        result.paused,
        result.items,
        result.resumed,
    )
