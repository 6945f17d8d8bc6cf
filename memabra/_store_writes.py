"""The writes of :class:`~memabra.StoreMemory` to a LangGraph store: a new fact with the memories it
retires and cuts, an import's batch, a restatement's refresh and a retirement by hand. Each item
carries its latest change in the same put (``StoreMemory._put``), so a process dying between two
puts is finished by the next reader or writer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from langgraph.store.base import GetOp, PutOp

from memabra._errors import InvalidRecordError
from memabra._memory_records import MemoryAction, MemoryChange, MemoryStatus
from memabra._records import RegistryItem
from memabra._store_items import (
    PENDING,
    cut_value,
    history_entry,
    item_value,
    new_record,
    retirement_key,
    uncut,
    version,
)
from memabra._text import approx_tokens

if TYPE_CHECKING:
    from memabra._store_memory import StoreMemory

__all__ = ["refresh", "retire", "store", "store_many"]


def store(
    memory: StoreMemory,
    item: RegistryItem,
    change: MemoryChange,
    retire: Sequence[MemoryChange] = (),
    cut: Sequence[MemoryChange] = (),
) -> None:
    """``StoreMemory._store``: ``item`` with its change, then each memory it retires and cuts."""
    ns = memory.namespace_for(item.owner)
    # Reads first, so a bad retire id fails before anything is written.
    old = {c.memory_id: memory.store.get(ns, c.memory_id) for c in [*retire, *cut]}
    missing = [c.memory_id for c in retire if old[c.memory_id] is None]
    if missing:
        raise InvalidRecordError(f"user {item.owner!r} has no memory {missing[0]!r}")
    # The new memory names what it retires and cuts: a process dying before those writes leaves
    # them to the next reader (``_raw``) or writer (``_finish``), never both memories current.
    retired = [
        {**new_record(c), "key": retirement_key(c.memory_id, version(read.value, read.updated_at))}
        for c in retire
        if (read := old[c.memory_id]) is not None
    ]
    created = new_record(change)  # before the cuts' records: a cut is ordered after its cause
    trimmed = [r for c in cut if (read := old[c.memory_id]) is not None and uncut(read.value, r := new_record(c))]
    named = {**({"retires": retired} if retired else {}), **({"cuts": trimmed} if trimmed else {})}
    memory._put(ns, item_value(item), {**created, **named}, memory.store.get(ns, item.id))
    for r in retired:
        prior = old[r["memory_id"]]
        memory._put(ns, {**prior.value, "status": "retired", "superseded_by": item.id}, r, prior)  # type: ignore[union-attr]
    for r in trimmed:
        prior = old[r["memory_id"]]
        memory._put(ns, cut_value(prior.value, str(r["new_text"])), r, prior)  # type: ignore[union-attr]


def store_many(memory: StoreMemory, pairs: Sequence[tuple[RegistryItem, MemoryChange]]) -> bool:
    """New memories of one user (an import) in a few batches, each item carrying its change; False
    (nothing written) where they must go one by one: several users, or an id already stored, whose
    item is finished first."""
    if len({item.owner for item, _ in pairs}) != 1:
        return False
    owner = pairs[0][0].owner
    ns, hns = memory.namespace_for(owner), memory._history_ns(owner)
    if any(found is not None for found in memory.store.batch([GetOp(ns, item.id) for item, _ in pairs])):
        return False
    records = [new_record(change) for _, change in pairs]
    puts = [PutOp(ns, i.id, {**item_value(i), PENDING: r}) for (i, _), r in zip(pairs, records, strict=True)]
    puts += [PutOp(hns, str(r["key"]), history_entry(r), index=False) for r in records]
    memory._batched(puts)
    return True


def refresh(memory: StoreMemory, change: MemoryChange) -> None:
    """``StoreMemory._refresh``: a restatement takes the new text; a memory retired since the
    caller read it keeps its text."""
    ns = memory.namespace_for(change.user_id)
    current = memory.store.get(ns, change.memory_id)
    if current is None:
        raise InvalidRecordError(f"user {change.user_id!r} has no memory {change.memory_id!r}")
    if current.value.get("status") == "retired":
        raise InvalidRecordError(f"memory {change.memory_id!r} is retired")
    value = dict(current.value)
    if change.new_text:
        value.update(
            text=change.new_text,
            content={"content": change.new_text},
            tokens=approx_tokens(change.new_text),
            name=change.new_text[:60],
        )
    memory._put(ns, value, new_record(change), current)


def retire(
    memory: StoreMemory, user_id: str, memory_id: str, *, reason: str, at: datetime | None, episode_id: str | None
) -> None:
    """``StoreMemory.retire``'s write, under the user's lock: the item keeps its text, with
    ``status`` retired, and its change in the same put."""
    ns = memory.namespace_for(user_id)
    current = memory.store.get(ns, memory_id) if isinstance(memory_id, str) and memory_id else None
    if current is None:
        raise InvalidRecordError(f"user {user_id!r} has no memory {memory_id!r}")
    if current.value.get("status") == MemoryStatus.RETIRED.value:
        raise InvalidRecordError(f"memory {memory_id!r} is already retired; nothing changed")
    text = memory._to_item(user_id, current).text
    change = MemoryChange(
        memory_id, user_id, MemoryAction.RETIRED, at or memory.clock(), text, text, episode_id, reason
    )
    # retired by hand, not by a newer fact: a superseded_by left from an earlier retirement goes
    value = {k: v for k, v in current.value.items() if k != "superseded_by"}
    memory._put(ns, {**value, "status": MemoryStatus.RETIRED.value}, new_record(change), current)
