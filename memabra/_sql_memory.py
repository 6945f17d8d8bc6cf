"""Memories in memabra's own registry table, next to the episode log (the default backend).

The log stores text without NUL bytes and with lone surrogates replaced (PostgreSQL refuses both):
a user id holding either would be stored as, and read back as, another user's ("a\\x00nn" as
"ann", "ann\\udc80" as "ann\\ufffd"). Such an id is refused (:func:`~memabra._memory_records.storable_user`) by every
method, before anything is read or written, rather than opening another user's memories.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime

from memabra._memory import MemoryBackend, Supersession
from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, storable_user
from memabra._memory_restore import RestoredMemory, restore_memory
from memabra._memory_write import ActiveRead
from memabra._recall import RECALL_ALL, RECALL_LIMIT, RecallIndex
from memabra._records import RegistryItem, new_id, utcnow
from memabra._text import approx_tokens
from memabra.router import CachingEncoder
from memabra.storage import EpisodeLog, MemoryRegistry

__all__ = ["SQLMemory"]


class SQLMemory(MemoryBackend):
    """Memories in memabra's registry table, next to the episode log."""

    def __init__(
        self,
        log: EpisodeLog,
        *,
        supersession: Supersession | None = None,
        encoder: CachingEncoder | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], str] = new_id,
    ) -> None:
        super().__init__(supersession=supersession, encoder=encoder, clock=clock, new_id=new_id)
        self.log = log
        self._registry = MemoryRegistry(log.engine)
        self._index = RecallIndex(encoder)

    def items(self, user_id: str) -> list[RegistryItem]:
        return self._registry.active_items(storable_user(user_id))

    def _active_pairs(self, user_id: str) -> list[tuple[str, str]]:
        return self._registry.active_texts(storable_user(user_id))

    def _known_texts(self, user_id: str) -> list[str]:
        return self._registry.known_texts(storable_user(user_id))

    def _read_active(self, user_id: str) -> ActiveRead:
        generation = self._registry.generation(storable_user(user_id))  # first: a write during the read moves it
        return ActiveRead(user_id, tuple(self._registry.active_texts(user_id)), generation=generation)

    def _store_decided(
        self,
        read: ActiveRead,
        item: RegistryItem,
        change: MemoryChange,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[MemoryChange] = (),
    ) -> None:
        if read.generation is None:
            self._store(item, change, retire, cut)
            return
        cuts = [(c, approx_tokens(c.new_text or "")) for c in cut]
        self._registry.write(item, change, retire=retire, cut=cuts, read_at=read.generation)

    def _write_count(self, user_id: str) -> int:
        """The registry's generation of the user's memories, one key lookup: every write bumps it
        once, in its own transaction (:class:`~memabra._memory_write.CountsWrites`)."""
        return self._registry.generation(storable_user(user_id))

    def records(self, user_id: str, *, include_retired: bool = True) -> list[MemoryRecord]:
        return self._registry.records(storable_user(user_id), include_retired=include_retired)

    def get(self, user_id: str, memory_id: str) -> MemoryRecord:
        return self._registry.record(storable_user(user_id), memory_id)

    def history(self, user_id: str, memory_id: str) -> list[MemoryChange]:
        self._registry.record(storable_user(user_id), memory_id)
        return self._registry.history(user_id, memory_id)

    def retire(
        self,
        user_id: str,
        memory_id: str,
        *,
        reason: str = "retired by hand",
        at: datetime | None = None,
        episode_id: str | None = None,
    ) -> MemoryRecord:
        """Stop recalling a memory without forgetting it: it keeps its text, counters and history
        and can be restored. Raises :class:`~memabra.InvalidRecordError` if it is already retired."""
        text = self.get(user_id, memory_id).text
        now = at or self.clock()
        change = MemoryChange(memory_id, user_id, MemoryAction.RETIRED, now, text, text, episode_id, reason)
        self._registry.set_retired(change, retired=True)
        return self.get(user_id, memory_id)

    def restore(
        self,
        user_id: str,
        memory_id: str,
        *,
        replace: bool = False,
        keep_both: bool = False,
        reason: str = "restored by hand",
        at: datetime | None = None,
    ) -> RestoredMemory:
        """Recall a retired memory again, never silently beside a current memory that states
        another value of its subject (two current cities): that is refused, unless ``replace``
        retires it in the same write or ``keep_both`` keeps it (a supersession that was wrong).
        Raises :class:`~memabra.InvalidRecordError` if the memory is not retired (see
        :func:`~memabra._memory_restore.restore_memory`, which the CLI and the admin run too)."""
        return restore_memory(self, user_id, memory_id, replace=replace, keep_both=keep_both, reason=reason, at=at)

    def recall(self, user_id: str, query: str, *, limit: int = RECALL_LIMIT) -> list[RegistryItem]:
        storable_user(user_id)
        self._index.encoder = self.encoder
        items: list[RegistryItem] = []

        def load() -> list[RegistryItem]:
            items.extend(self.items(user_id))
            return items

        pool = self._index.top(
            user_id, self._registry.generation(user_id), load, query, limit, small=max(RECALL_ALL, limit)
        )
        return pool

    def _store(
        self,
        item: RegistryItem,
        change: MemoryChange,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[MemoryChange] = (),
    ) -> None:
        if change.action is MemoryAction.CREATED and not retire and not cut:
            self._registry.write_many([(item, change)])  # a fresh id: a plain insert, no lookup
        else:
            cuts = [(c, approx_tokens(c.new_text or "")) for c in cut]
            self._registry.write(item, change, retire=retire, cut=cuts)

    def _store_many(self, pairs: Sequence[tuple[RegistryItem, MemoryChange]]) -> None:
        self._registry.write_many(pairs)

    def _store_many_decided(self, read: ActiveRead, pairs: Sequence[tuple[RegistryItem, MemoryChange]]) -> None:
        self._registry.write_many(pairs, read_at=read.generation)

    def _refresh(self, change: MemoryChange) -> None:
        self._registry.refresh(change, approx_tokens(change.new_text or ""))

    def _forget(self, user_id: str, memory_ids: Sequence[str] | None) -> int:
        return self._registry.forget(storable_user(user_id), memory_ids)

    def _writing(self, user_id: str) -> AbstractContextManager[None]:
        storable_user(user_id)  # every write (remember, import, update, put, restore, forget) comes here first
        return nullcontext()
