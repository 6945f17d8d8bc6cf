"""Forgetting memories held in a LangGraph store (:meth:`~memabra.StoreMemory.forget`,
``forget_all`` and ``erase_user``): the items, every history entry, and what the episode log kept
of their texts (stored embeddings)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from langgraph.store.base import PutOp

from memabra._errors import InvalidRecordError
from memabra._store_items import change_texts, pending_change, readable_text
from memabra.storage import forget_in_log

if TYPE_CHECKING:
    from memabra._store_memory import StoreMemory

__all__ = ["forget"]


def forget(memory: StoreMemory, user_id: str, memory_ids: Sequence[str] | None) -> int:
    """Delete ``memory_ids`` of ``user_id`` (all of them for ``None``) with their history; how many.
    An unknown id fails before anything is deleted."""
    ns, hns = memory.namespace_for(user_id), memory._history_ns(user_id)
    items = {str(it.key): it for it in memory._all(ns) if tuple(it.namespace) == ns}
    ids = sorted(items) if memory_ids is None else list(dict.fromkeys(memory_ids))
    unknown = [m for m in ids if m not in items]
    if unknown:
        raise InvalidRecordError(f"user {user_id!r} has no memory {unknown[0]!r}; nothing was forgotten")
    wanted = set(ids)
    # Forgetting all takes every history entry, those of memories deleted behind memabra's back too.
    history = [
        it
        for it in memory._all(hns)
        if tuple(it.namespace) == hns
        and isinstance(it.value, Mapping)
        and (memory_ids is None or it.value.get("memory_id") in wanted)
    ]
    # every text the memories had, so their stored embeddings go too
    texts = {t for mid in ids if (t := readable_text(items[mid].value))}
    texts.update(change_texts(it.value for it in history))
    texts.update(change_texts(p for mid in ids if (p := pending_change(items[mid].value)) is not None))
    gone = list(dict.fromkeys([*ids, *(str(it.value.get("memory_id")) for it in history)]))
    # history first: a forget cut short is run again and finds the memories
    memory._batched([PutOp(hns, str(it.key), None) for it in history])
    memory._batched([PutOp(ns, mid, None) for mid in ids])
    if memory.log is not None and gone:
        forget_in_log(memory.log.engine, user_id, gone, texts)
    return len(ids)
