"""Memory records and memory changes as the registry and history rows store them, and back.

History rows are listed by time, then by id: ids that grow in the order they are made keep changes
of one instant in order (an import creates a memory and supersedes it at the same time).
"""

from __future__ import annotations

import secrets
import threading
import time

from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus
from memabra._records import RegistryItem
from memabra.storage import _convert as cv
from memabra.storage._memory_models import MemoryHistoryRow
from memabra.storage._models import Base, RegistryRow, table_of
from memabra.storage._rows import prepare

__all__ = ["MAX_REASON_CHARS", "history_row", "history_values", "memory_change", "memory_record", "registry_values"]

# memory_history.reason's width: a change's reason (who and why) past it is cut to fit; the CLI and
# the admin refuse a longer one a person typed (memabra._memory_write.audit_reason)
MAX_REASON_CHARS = 200

_SEQ_LOCK = threading.Lock()
_last_seq = 0


def _history_id() -> str:
    """32 characters: 20 digits that only grow within a process (nanoseconds, bumped past the last
    one), then 12 random hex digits so two processes never collide."""
    global _last_seq
    with _SEQ_LOCK:
        _last_seq = max(_last_seq + 1, time.time_ns())
        seq = _last_seq
    return f"{seq:020d}{secrets.token_hex(6)}"


def history_values(c: MemoryChange) -> dict[str, object]:
    return _clean_row(
        MemoryHistoryRow,
        {
            "id": _history_id(),
            "owner": c.user_id,
            "memory_id": c.memory_id,
            "action": c.action.value,
            "old_text": c.old_text,
            "new_text": c.new_text,
            "episode_id": c.episode_id,
            "reason": c.reason[:MAX_REASON_CHARS],
            "at": c.at,
        },
    )


def history_row(c: MemoryChange) -> MemoryHistoryRow:
    return MemoryHistoryRow(**history_values(c))


def registry_values(item: RegistryItem) -> dict[str, object]:
    # Text the databases refuse (NUL, lone surrogates) is cleaned the way every other write is.
    return _clean_row(RegistryRow, cv.registry_values(item))


def _clean_row(model: type[Base], values: dict[str, object]) -> dict[str, object]:
    return prepare(table_of(model), [values])[0]


def memory_record(r: RegistryRow) -> MemoryRecord:
    return MemoryRecord(
        id=r.id,
        user_id=r.owner,
        text=r.text,
        status=MemoryStatus.RETIRED if r.retired_at is not None else MemoryStatus.ACTIVE,
        created_at=r.created_at,
        updated_at=r.updated_at,
        last_used_at=r.last_chosen_at,
        superseded_by=r.superseded_by,
        source=r.source,
        times_chosen=r.times_chosen or 0,
        times_used=r.times_used or 0,
    )


def memory_change(r: MemoryHistoryRow) -> MemoryChange:
    return MemoryChange(
        memory_id=r.memory_id,
        user_id=r.owner,
        action=MemoryAction(r.action),
        at=r.at,
        old_text=r.old_text,
        new_text=r.new_text,
        episode_id=r.episode_id,
        reason=r.reason,
    )
