"""Settling what two processes wrote for one user at once in a LangGraph store.

A store has no transactions and :class:`~memabra.StoreMemory`'s lock holds within one process, so
two workers may both read a user's memories, both find nothing to replace, and both write: "I live
in Lyon" and "I live in Paris" would both stay current. After each ``remember`` the writer reads
the memories again and settles its own against those another process wrote since its first read
(:func:`settle`, given that write's own :class:`StoreRead`). A pair is settled as if its two writes
had been made one after the other, in :func:`~memabra._store_items.written` order (the writers'
clocks): the later one retires the earlier (or cuts the replaced fact out of it) when it would
have then, and a later restatement retires the earlier one. Each of the two writers decides alike,
from what is stored, so the one of them that reads last settles the pair, whichever it is; retiring
twice writes one history entry (its key comes from the write retired, :func:`~memabra._store_items.retirement_key`).

Not guaranteed: a writer dying between its write and its settling read leaves the pair for the
next write on that subject (which replaces both); two imports (``remember_many``) at once store
one item per fact but leave two values of a subject current; the order is the writers' clocks, so
clocks skewed across machines order their writes by the skew.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memabra._memory_records import MemoryAction, MemoryChange
from memabra._memory_write import ActiveRead
from memabra._restatement import is_restatement
from memabra._store_items import new_record, retirement_key, version, written

if TYPE_CHECKING:
    from memabra._store_memory import StoreMemory

__all__ = ["StoreRead", "settle"]

logger = logging.getLogger("memabra")


@dataclass(frozen=True, slots=True)
class StoreRead(ActiveRead):
    """A write's read of a user's memories in a store, handed to that write (never kept on the
    memory object or the thread, where another write made meanwhile could take or reset it):
    ``versions`` of the active memories, to :func:`settle` against, and every stored ``keys``
    (retired ones too), to pick the new memory's key from."""

    versions: Mapping[str, str]
    keys: frozenset[str]


def settle(memory: StoreMemory, user_id: str, mine: str, seen: Mapping[str, str], episode_id: str | None) -> None:
    """Settle the memory ``mine``, just written, with those another process wrote since the write
    path read ``seen`` (each active memory's :func:`~memabra._store_items.version`)."""
    active = {i.id: (i, v) for i, v in memory._raw(user_id) if not i.metadata.get("status")}
    if mine not in active:
        return
    fresh = [k for k, (i, v) in active.items() if k != mine and seen.get(k) != version(v, i.updated_at)]
    if not fresh:  # nobody else wrote: what ``remember`` decided stands
        return
    texts = {k: i.text for k, (i, _) in active.items()}
    versions = {k: version(v, i.updated_at) for k, (i, v) in active.items()}
    order = {k: written(v, k) for k, (_, v) in active.items()}
    older = [(k, texts[k]) for k in fresh if order[k] < order[mine]]
    replaced = set(memory.supersession.superseded(texts[mine], older)) if older else set()
    for k, text in older:
        if k in replaced or is_restatement(texts[mine], text):
            _replace(memory, user_id, k, versions[k], (mine, texts[mine]), episode_id, k in replaced)
    for k in sorted((k for k in fresh if order[k] > order[mine]), key=order.__getitem__):
        later = (k, texts[k])
        if mine in memory.supersession.superseded(texts[k], [(mine, texts[mine])]):
            _replace(memory, user_id, mine, versions[mine], later, episode_id, True)
            return
        if is_restatement(texts[k], texts[mine]):
            _replace(memory, user_id, mine, versions[mine], later, episode_id, False)
            return


def _replace(
    memory: StoreMemory,
    user_id: str,
    memory_id: str,
    read: str,
    by: tuple[str, str],
    episode_id: str | None,
    superseded: bool,
) -> None:
    """``memory_id`` (as read at version ``read``) replaced by the later ``by`` (id, text):
    retired, or cut down to the facts ``by`` leaves standing."""
    ns = memory.namespace_for(user_id)
    prior = memory.store.get(ns, memory_id)
    if prior is None or prior.value.get("status") == "retired" or version(prior.value, prior.updated_at) != read:
        return  # settled, or written again, since: that write settles it
    by_id, by_text = by
    old_text = memory._to_item(user_id, prior).text
    rest = memory._left_standing(by_text, old_text) if superseded else None
    now = memory.clock()
    if rest:
        memory._rewrite(user_id, memory_id, rest, episode_id, f"part superseded by {by_id}", now)
    elif rest is None:
        why = f"superseded by {by_id}"
        change = MemoryChange(memory_id, user_id, MemoryAction.RETIRED, now, old_text, None, episode_id, why)
        record = {**new_record(change), "key": retirement_key(memory_id, read)}
        memory._put(ns, {**prior.value, "status": "retired", "superseded_by": by_id}, record, prior)
    else:
        return
    logger.info("memory %s, written at once in another process, settles %s for user %s", by_id, memory_id, user_id)
