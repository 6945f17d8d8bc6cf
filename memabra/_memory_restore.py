"""Restoring a retired memory without leaving a user two current values of one subject.

A memory is retired when a newer fact replaced it ("I moved to Bergen" by "I live in Lyon") or by
hand. Making it current again beside the fact that replaced it would have the router offer both,
so :func:`restore_memory` refuses while such a memory is current, or, with ``replace=True``,
retires it in the same write (of a memory joining several facts only the contradicted one goes,
as when a new fact arrives). ``keep_both=True`` is for a supersession that was wrong (the two
facts were about different things): both stay current, the user's own call. Works on every
:class:`~memabra._memory.MemoryBackend`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime

from memabra._errors import InvalidRecordError
from memabra._memory import MemoryBackend
from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus
from memabra._memory_write import clashing_memories, decided_again
from memabra._records import utcnow
from memabra._restatement import is_restatement

__all__ = ["RestoredMemory", "conflicting_memories", "restore_memory"]

logger = logging.getLogger("memabra")


@dataclass(frozen=True, slots=True)
class RestoredMemory:
    """A restored memory and what restoring it changed: the current memories it retired and
    those it cut its contradicted fact out of."""

    memory: MemoryRecord
    retired: tuple[str, ...] = ()
    trimmed: tuple[str, ...] = ()


def conflicting_memories(backend: MemoryBackend, user_id: str, memory_id: str) -> list[MemoryRecord]:
    """The user's current memories that ``memory_id`` contradicts (it states another value of
    their subject) or restates (restoring it would duplicate them), oldest first."""
    record = backend.get(user_id, memory_id)
    current = [r for r in backend.list(user_id, include_retired=False) if r.id != memory_id]
    clashing = {mid for mid, _ in clashing_memories(backend, record.text, [(r.id, r.text) for r in current])}
    return [r for r in current if r.id in clashing]


def restore_memory(
    backend: MemoryBackend,
    user_id: str,
    memory_id: str,
    *,
    replace: bool = False,
    keep_both: bool = False,
    reason: str = "restored by hand",
    at: datetime | None = None,
) -> RestoredMemory:
    """Make a retired memory current again, with a ``restored`` entry in its history.

    Raises :class:`~memabra.InvalidRecordError` when it is not retired, or when a current memory
    contradicts it and neither ``replace`` nor ``keep_both`` is given (nothing is written). With
    ``replace``, the contradicting memories are retired ("superseded by" the restored one) in the
    same write; with ``keep_both`` they stay current beside it."""
    if replace and keep_both:
        raise InvalidRecordError("replace and keep_both exclude each other: retire what it contradicts, or keep it")
    # read, check and write as one step against the user's other writers in this process; one in
    # another process that lands between the read and the write refuses it, and it is decided again
    with backend._writing(user_id):
        return decided_again(
            user_id,
            "a restore",
            lambda: _restore(backend, user_id, memory_id, replace=replace, keep_both=keep_both, reason=reason, at=at),
        )


def _restore(
    backend: MemoryBackend,
    user_id: str,
    memory_id: str,
    *,
    replace: bool,
    keep_both: bool,
    reason: str,
    at: datetime | None,
) -> RestoredMemory:
    read = backend._read_active(user_id)  # first: a write from here on refuses this one
    record = backend.get(user_id, memory_id)
    if record.status is not MemoryStatus.RETIRED:
        raise InvalidRecordError(f"memory {memory_id!r} is already active; nothing changed")
    others = [p for p in read.pairs if p[0] != memory_id]
    clashing = [] if keep_both else clashing_memories(backend, record.text, others)
    if clashing and not replace:
        listing = ", ".join(f"{mid} ({text!r})" for mid, text in clashing)
        raise InvalidRecordError(
            f"memory {memory_id!r} ({record.text!r}) contradicts the current {listing}; restoring it would "
            "leave both current: restore with replace (--replace) to retire that in the same step, or with "
            "keep_both (--keep-both) if the two are about different things"
        )
    now = at or utcnow()
    whole: list[MemoryChange] = []
    trimmed: list[tuple[str, str]] = []
    for mid, text in clashing:
        # _left_standing: None retires the whole memory, a text keeps the facts not contradicted
        rest = None if is_restatement(record.text, text) else backend._left_standing(record.text, text)
        if rest is None:
            why = f"superseded by {memory_id} (restored)"
            whole.append(MemoryChange(mid, user_id, MemoryAction.RETIRED, now, text, None, None, why))
        elif rest:
            trimmed.append((mid, rest))
    item = dataclasses.replace(backend._item(user_id, memory_id, include_retired=True), updated_at=now)
    change = MemoryChange(memory_id, user_id, MemoryAction.RESTORED, now, record.text, record.text, None, reason)
    why = f"part superseded by {memory_id} (restored)"
    texts = dict(clashing)
    cut = [MemoryChange(mid, user_id, MemoryAction.UPDATED, now, texts[mid], rest, None, why) for mid, rest in trimmed]
    # the restore, the retirements and the cuts: one write, all or nothing, refused if `read` went
    # stale (a fact stored meanwhile would otherwise stay current beside the restored one unchecked)
    backend._store_decided(read, item, change, whole, cut)
    if whole or trimmed:
        replaced = ", ".join([c.memory_id for c in whole] + [mid for mid, _ in trimmed])
        logger.info("restored memory %s of user %s replaces %s", memory_id, user_id, replaced)
    return RestoredMemory(
        backend.get(user_id, memory_id), tuple(c.memory_id for c in whole), tuple(mid for mid, _ in trimmed)
    )
