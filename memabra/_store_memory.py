"""Memories in a LangGraph ``BaseStore`` you already run (``InMemoryStore``, ``PostgresStore``, ...).

The namespace is a template like LangMem's: ``("memories", "{user_id}")`` puts each user's
memories under their own namespace. Items written by memabra, LangMem or by hand are read:

* ``{"text": "..."}`` (memabra's own older shape);
* ``{"content": "..."}`` (LangMem's ``manage_memory`` tool);
* ``{"kind": "Memory", "content": {"content": "..."}}`` (LangMem's memory manager);
* ``{"kind": "UserProfile", "content": {"name": "Ann", "city": "Lyon"}}`` (a structured schema:
  read as "name: Ann; city: Lyon").

Any other shape is an error naming the item, never an empty memory. memabra writes ``text`` and
LangMem's memory-manager shape (``kind`` / ``content``) plus its own fields (``status``,
``source``, ...), so both read it back.
When the store has a vector index, recall is ``store.search(namespace, query=...)``; otherwise the
in-process hybrid index of :mod:`memabra._recall`. History lives beside the memories, under
``("memabra_history", *namespace)``; usage counters come from the episode log when ``log`` is given.

A store has no transactions: each item is written with its latest change (``memabra_change``) in
one put, and a new fact names the memories it retires and cuts, so a process dying between two
puts is finished by the next reader or writer (``_finish``). One user's writers in a process take
turns; writers in several processes store a fact stated at once in all of them as one item (its key
comes from the fact) and leave one current value of a subject (:mod:`memabra._store_settle`).
User ids with '.' (which LangGraph refuses in a label) are stored percent-escaped; one the episode
log cannot store as given (NUL, a lone surrogate) is refused (:func:`memabra._store_items.user_label`). Forgetting is :mod:`memabra._store_forget`.
docs/memory.md ("LangGraph stores") has the details.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from types import MappingProxyType
from typing import Any

from langgraph.store.base import BaseStore, PutOp

from memabra import _store_writes as writes
from memabra._errors import ConfigError, InvalidRecordError
from memabra._memory import MemoryBackend, Supersession
from memabra._memory_records import MemoryChange, MemoryRecord, MemoryStatus
from memabra._memory_write import ActiveRead
from memabra._recall import RECALL_ALL, RECALL_LIMIT, RecallIndex
from memabra._records import CandidateKind, RegistryItem, new_id, utcnow
from memabra._store_forget import forget
from memabra._store_items import (
    PENDING,
    aware,
    change_from,
    change_order,
    created_at_of,
    cut_value,
    cuts,
    fresh_key,
    history_entry,
    memory_record,
    memory_text,
    names_others,
    pending_change,
    retirements,
    seq_of,
    stored_tokens,
    uncut,
    unfinished,
    user_label,
    version,
    with_created,
)
from memabra._store_settle import StoreRead, settle
from memabra.router import CachingEncoder
from memabra.storage import EpisodeLog, last_chosen

__all__ = ["StoreMemory", "memory_text"]

USER_FIELD = "{user_id}"
_HISTORY_ROOT = "memabra_history"
# LangGraph stores page their search; memabra reads a user's memories in pages of this size.
_PAGE = 1000
logger = logging.getLogger("memabra")
# Writers of one user in this process take turns (remember reads, then writes): striped locks.
_LOCKS = tuple(threading.RLock() for _ in range(64))


class StoreMemory(MemoryBackend):
    """Memories in a LangGraph ``BaseStore`` under ``namespace`` (a template with ``{user_id}``).

    ``prefix`` is the older spelling: ``prefix=("a", "b")`` means ``namespace=("a", "b", "{user_id}")``.
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        namespace: Sequence[str] | None = None,
        prefix: Sequence[str] | None = None,
        log: EpisodeLog | None = None,
        supersession: Supersession | None = None,
        encoder: CachingEncoder | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], str] = new_id,
    ) -> None:
        super().__init__(supersession=supersession, encoder=encoder, clock=clock, new_id=new_id)
        if namespace is not None and prefix is not None:
            raise ConfigError("give StoreMemory a namespace template or a prefix, not both")
        template = tuple(namespace) if namespace is not None else (*(prefix or ("memabra", "memories")), USER_FIELD)
        if not template or not any(USER_FIELD in part for part in template):
            raise ConfigError(
                f"the memory namespace {template!r} must contain '{USER_FIELD}': without it every user would share memories"
            )
        self.store = store
        self.namespace = template
        self.log = log
        self._index = RecallIndex(encoder)

    # ------------------------------------------------------------------ namespaces

    def namespace_for(self, user_id: str) -> tuple[str, ...]:
        label = user_label(user_id)
        return tuple(part.replace(USER_FIELD, label) for part in self.namespace)

    def _writing(self, user_id: str) -> AbstractContextManager[None]:
        # a store has no transactions: one user's writers in this process take turns (each reads
        # the memories, then writes)
        return self._locked(user_id)

    @contextmanager
    def _locked(self, user_id: str) -> Iterator[None]:
        with _LOCKS[hash((id(self.store), self.namespace_for(user_id))) % len(_LOCKS)]:
            yield

    def _history_ns(self, user_id: str) -> tuple[str, ...]:
        return (_HISTORY_ROOT, *self.namespace_for(user_id))

    @property
    def has_index(self) -> bool:
        return bool(getattr(self.store, "index_config", None))

    # ------------------------------------------------------------------ reading

    def _all(self, ns: tuple[str, ...], filter: dict[str, Any] | None = None) -> list[Any]:
        found: list[Any] = []
        while True:
            page = self.store.search(ns, filter=filter, limit=_PAGE, offset=len(found))
            found.extend(page)
            if len(page) < _PAGE:
                return found

    def _raw(self, user_id: str) -> list[tuple[RegistryItem, Mapping[str, Any]]]:
        ns = self.namespace_for(user_id)
        # search() matches namespace prefixes: keep the user's own namespace only.
        found = [it for it in self._all(ns) if tuple(it.namespace) == ns]
        # a writer died between a new fact and the retirements and cuts it names: finish them
        if unfinished((str(it.key), it.value) for it in found):
            with self._locked(user_id):
                retiring = [it for it in found if names_others(it.value)]
                if sum(self._finish(ns, it.value) for it in retiring):
                    found = [it for it in self._all(ns) if tuple(it.namespace) == ns]
        return [(self._to_item(user_id, it), it.value) for it in found]

    def _to_item(self, user_id: str, it: Any) -> RegistryItem:
        value = it.value if isinstance(it.value, Mapping) else {}
        text = memory_text(value, where=f"{'/'.join(it.namespace)}/{it.key}")
        metadata = {"status": "retired"} if value.get("status") == MemoryStatus.RETIRED.value else {}
        return RegistryItem(
            kind=CandidateKind.MEMORY,
            id=str(it.key),
            owner=user_id,
            text=text,
            tokens=stored_tokens(value.get("tokens"), text),
            name=str(value.get("name") or text[:60]),
            source=str(value.get("source", "store")),
            metadata=metadata,
            created_at=created_at_of(it),
            updated_at=aware(it.updated_at),
        )

    def _with_counts(self, user_id: str, items: list[RegistryItem]) -> list[RegistryItem]:
        if self.log is None or not items:
            return items
        stats = self.log.candidate_stats(user_id, [i.id for i in items])
        out = []
        for i in items:
            s = stats.get(i.id)
            out.append(i if s is None else dataclasses.replace(i, times_chosen=s.times_chosen, times_used=s.times_used))
        return out

    def items(self, user_id: str) -> list[RegistryItem]:
        active = [i for i, _ in self._raw(user_id) if not i.metadata.get("status")]
        return self._with_counts(user_id, active)

    def records(self, user_id: str, *, include_retired: bool = True) -> list[MemoryRecord]:
        raw = self._raw(user_id)
        used = last_chosen(self.log.engine, user_id, [i.id for i, _ in raw]) if self.log is not None and raw else {}
        out = [
            memory_record(user_id, item, value, used.get(item.id))
            for item, value in raw
            if include_retired or not item.metadata.get("status")
        ]
        return sorted(out, key=lambda r: (r.created_at, r.id))

    def get(self, user_id: str, memory_id: str) -> MemoryRecord:
        ns = self.namespace_for(user_id)
        found = self.store.get(ns, memory_id) if isinstance(memory_id, str) and memory_id else None
        if found is None:
            raise InvalidRecordError(f"user {user_id!r} has no memory {memory_id!r}")
        used = last_chosen(self.log.engine, user_id, [memory_id]) if self.log is not None else {}
        return memory_record(user_id, self._to_item(user_id, found), found.value, used.get(memory_id))

    def history(self, user_id: str, memory_id: str) -> list[MemoryChange]:
        ns = self.namespace_for(user_id)
        current = self.store.get(ns, memory_id) if isinstance(memory_id, str) and memory_id else None
        if current is None:
            raise InvalidRecordError(f"user {user_id!r} has no memory {memory_id!r}")
        hns = self._history_ns(user_id)
        found = self._all(hns, {"memory_id": memory_id})
        entries = {str(it.key): it.value for it in found if tuple(it.namespace) == hns}
        pending = pending_change(current.value)
        if pending is not None and pending.get("memory_id") == memory_id:
            entries.setdefault(str(pending.get("key")), pending)  # its history entry was never written
        at = "/".join(hns)
        changes = [(change_from(user_id, v, where=f"{at}/{k}"), seq_of(v.get("seq"))) for k, v in entries.items()]
        return [c for c, _ in sorted(changes, key=change_order)]

    def recall(self, user_id: str, query: str, *, limit: int = RECALL_LIMIT) -> list[RegistryItem]:
        if self.has_index and query.strip():
            return self._with_counts(user_id, self._searched(user_id, query, limit))
        items = self.items(user_id)
        if len(items) <= max(RECALL_ALL, limit):
            return items
        version = (len(items), max(str(i.updated_at) for i in items))
        self._index.encoder = self.encoder
        return self._index.top(user_id, version, lambda: items, query, limit)

    def retire(
        self,
        user_id: str,
        memory_id: str,
        *,
        reason: str = "retired by hand",
        at: datetime | None = None,
        episode_id: str | None = None,
    ) -> MemoryRecord:
        """Stop recalling a memory without forgetting it (see :meth:`MemoryBackend.retire`): the item
        keeps its text, with ``status`` retired, and its change in the same put."""
        with self._locked(user_id):
            writes.retire(self, user_id, memory_id, reason=reason, at=at, episode_id=episode_id)
        return self.get(user_id, memory_id)

    def _searched(self, user_id: str, query: str, limit: int) -> list[RegistryItem]:
        """The store's vector search, read on past retired memories and nested namespaces (which
        its search also returns) until ``limit`` active memories of the user are found."""
        ns, offset, page = self.namespace_for(user_id), 0, max(limit * 2, 20)
        found: list[RegistryItem] = []
        while len(found) < limit:
            hits = self.store.search(ns, query=query, limit=page, offset=offset)
            offset += len(hits)
            items = (self._to_item(user_id, it) for it in hits if tuple(it.namespace) == ns)
            found.extend(i for i in items if not i.metadata.get("status"))
            if len(hits) < page:
                break
        return found[:limit]

    # ------------------------------------------------------------------ writing

    def _read_active(self, user_id: str) -> StoreRead:
        raw = self._raw(user_id)
        active = [(i, v) for i, v in raw if not i.metadata.get("status")]
        return StoreRead(
            user_id,
            tuple((i.id, i.text) for i, _ in active),
            # what the write decides on, for ``settle`` to tell what other processes wrote since
            versions=MappingProxyType({i.id: version(v, i.updated_at) for i, v in active}),
            keys=frozenset(i.id for i, _ in raw),
        )

    def _known_texts(self, user_id: str) -> list[str]:
        hns = self._history_ns(user_id)
        past = [it.value for it in self._all(hns) if tuple(it.namespace) == hns and isinstance(it.value, Mapping)]
        texts = [text for v in past for text in (v.get("old_text"), v.get("new_text")) if isinstance(text, str)]
        return texts + [item.text for item, _ in self._raw(user_id)]

    def _fresh_id(self, read: ActiveRead, fact: str) -> str:
        # One fact stored by two processes at once lands on one item; stated again after its memory
        # was retired, it takes the next key and leaves the retired memory as it was.
        if isinstance(read, StoreRead):  # every key the read saw, retired ones too
            return fresh_key(read.user_id, fact, read.keys.__contains__)
        ns = self.namespace_for(read.user_id)
        return fresh_key(read.user_id, fact, lambda key: self.store.get(ns, key) is not None)

    def _settle(self, read: ActiveRead, memory_id: str, episode_id: str | None) -> None:
        # The lock holds in this process only: what another process wrote since ``read`` is settled
        # after the write (memabra._store_settle).
        if isinstance(read, StoreRead):
            settle(self, read.user_id, memory_id, read.versions, episode_id)

    def _put(self, ns: tuple[str, ...], value: dict[str, Any], record: dict[str, Any], current: Any) -> None:
        """Write an item with its change ``record`` (in the same put), then the history entry.
        What a process died before on ``current`` (its last history entry, its retirements) first."""
        if current is not None:
            self._finish(ns, current.value)
        self.store.put(ns, str(record["memory_id"]), {**with_created(value, current), PENDING: record})
        self.store.put((_HISTORY_ROOT, *ns), str(record["key"]), history_entry(record), index=False)

    def _finish(self, ns: tuple[str, ...], value: object) -> bool:
        """Finish what the write of ``value`` left undone: the history entry of its last change and
        the memories that change retires. True when anything was written."""
        pending = pending_change(value)
        if pending is None:
            return False
        hns, wrote = (_HISTORY_ROOT, *ns), False
        if self.store.get(hns, str(pending["key"])) is None:
            self.store.put(hns, str(pending["key"]), history_entry(pending), index=False)
            wrote = True
        for r in retirements(pending):
            prior = self.store.get(ns, str(r["memory_id"]))
            if prior is None or prior.value.get("status") == "retired":
                continue
            if self.store.get(hns, str(r["key"])) is not None:
                continue  # retired by this change, and restored since
            self._put(ns, {**prior.value, "status": "retired", "superseded_by": pending["memory_id"]}, r, prior)
            wrote = True
        for r in cuts(pending):
            prior = self.store.get(ns, str(r["memory_id"]))
            if prior is None or not uncut(prior.value, r) or self.store.get(hns, str(r["key"])) is not None:
                continue  # cut, or written since: that write stands
            self._put(ns, cut_value(prior.value, str(r["new_text"])), r, prior)
            wrote = True
        if wrote:
            logger.warning("finished an interrupted store write of memory %s in %s", pending["memory_id"], "/".join(ns))
        return wrote

    def _store(
        self,
        item: RegistryItem,
        change: MemoryChange,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[MemoryChange] = (),
    ) -> None:
        writes.store(self, item, change, retire, cut)

    def _store_many(self, pairs: Sequence[tuple[RegistryItem, MemoryChange]]) -> None:
        if not writes.store_many(self, pairs):
            super()._store_many(pairs)

    def _batched(self, ops: Sequence[PutOp]) -> None:
        for start in range(0, len(ops), _PAGE):
            self.store.batch(ops[start : start + _PAGE])

    def _refresh(self, change: MemoryChange) -> None:
        writes.refresh(self, change)

    def _forget(self, user_id: str, memory_ids: Sequence[str] | None) -> int:
        return forget(self, user_id, memory_ids)
