"""Erasing a user: every episode the log holds of them and every memory, as one audited run.

The episodes go first, with everything logged under them (rewards a learner has not read too: an
erasure cannot wait for learning), then the memories with their histories, through the memory
backend that holds them. The run's entry in the deletion audit trail (``memabra episodes
deletions``) records both counts and is marked finished only after both; a run that dies part way
stays unfinished, ``memabra status`` names it, and erasing again finishes the job. What was learned
from the user stays: policy weights hold hashed features, not text.
"""

from __future__ import annotations

from collections.abc import Callable

from memabra._memory import MemoryBackend
from memabra.storage import EpisodeLog, UserErasure

__all__ = ["erase_user"]


def erase_user(
    log: EpisodeLog,
    user_id: str,
    *,
    memory: MemoryBackend | None = None,
    actor: str = "library",
    client: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> UserErasure:
    """Delete every episode of ``user_id`` in ``log`` and forget every memory of theirs in
    ``memory`` (default: the log's own memory table, :class:`~memabra.SQLMemory`), recorded in the
    deletion audit trail under ``actor`` (who asked) and ``client`` (from where).
    ``progress(episodes_deleted_so_far)`` is called after each committed chunk."""
    if memory is None:
        from memabra._sql_memory import SQLMemory

        memory = SQLMemory(log)
    backend = memory
    return log.erase_user(user_id, lambda: backend.forget_all(user_id), actor=actor, client=client, progress=progress)
