"""Where memories live, how they are written, and how people manage them.

:class:`MemoryBackend` holds the write path and the management API on a handful of storage
primitives; two backends ship: :class:`SQLMemory`, memabra's own registry table, and
:class:`StoreMemory` (:mod:`memabra._store_memory`), a LangGraph ``BaseStore`` you already run.

Writing (``remember``): a correction's complaint is cut off (the fact is kept, not "I already told
you"); a restatement of a stored memory refreshes it; a new fact on a single-valued subject ("I
moved to Hobart") retires the memory it replaces ("I live in Lyon"; a memory joining several facts
loses only the replaced one) — by rules, or by the chat model when the agent was built with
``extract_with_model=True``. Retired memories stay in
``list`` and ``history``, never in recall. Managing: ``list``, ``search`` (the router's own
recall), ``update`` (with history: what, when, from which episode), ``forget`` one or all.
The write path itself is :mod:`memabra._memory_write`.
"""

from __future__ import annotations

import builtins
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from memabra import _memory_write as write
from memabra._errors import ConfigError, InvalidRecordError
from memabra._facts import MAX_MEMORY_CHARS, FactExtractor, RuleFactExtractor, extract_facts
from memabra._llm_facts import LLMFactExtractor
from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus
from memabra._memory_write import ActiveRead
from memabra._recall import RECALL_ALL, RECALL_LIMIT, rank
from memabra._records import Candidate, CandidateKind, RegistryItem, new_id, utcnow
from memabra._text import approx_tokens
from memabra.router import CachingEncoder

__all__ = [
    "FactExtractor",
    "LLMFactExtractor",
    "MemoryAction",
    "MemoryBackend",
    "MemoryChange",
    "MemoryRecord",
    "MemoryStatus",
    "RecalledMemory",
    "RuleFactExtractor",
    "Supersession",
    "extract_facts",
]

logger = logging.getLogger("memabra")


class Supersession(Protocol):
    """Decides which stored memories (``(id, text)`` pairs) a new fact replaces."""

    def superseded(self, fact: str, existing: Sequence[tuple[str, str]]) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class RecalledMemory:
    """A search result: the memory and its hybrid-prior score (higher is closer)."""

    memory: MemoryRecord
    score: float


class MemoryBackend(ABC):
    """Storage primitives (abstract) plus the write path and management built on them.

    ``supersession`` decides which memories a new fact retires (rules by default; the agent
    passes its :class:`LLMFactExtractor` when built with ``extract_with_model=True``);
    ``encoder`` is what recall embeds with (``None``: lexical recall only). ``clock`` and
    ``new_id`` give a write its time and a new memory its id (default: the wall clock, random
    UUIDs); a simulation passes its own so that a seeded run stores the same memories each time.
    """

    supersession: Supersession = RuleFactExtractor()
    encoder: CachingEncoder | None = None

    def __init__(
        self,
        *,
        supersession: Supersession | None = None,
        encoder: CachingEncoder | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], str] = new_id,
    ) -> None:
        self.supersession = supersession if supersession is not None else RuleFactExtractor()
        self.encoder = encoder
        self.clock = clock
        self.new_id = new_id

    # ------------------------------------------------------------------ primitives

    @abstractmethod
    def items(self, user_id: str) -> builtins.list[RegistryItem]:
        """Every recallable (active) memory of ``user_id``, never another user's."""

    @abstractmethod
    def records(self, user_id: str, *, include_retired: bool = True) -> builtins.list[MemoryRecord]:
        """The user's memories as people see them, oldest first."""

    @abstractmethod
    def history(self, user_id: str, memory_id: str) -> builtins.list[MemoryChange]:
        """Every change to one memory, oldest first."""

    @abstractmethod
    def _store(
        self,
        item: RegistryItem,
        change: MemoryChange,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[MemoryChange] = (),
    ) -> None:
        """Insert or replace ``item``, record ``change``, retire ``retire`` and cut each memory in
        ``cut`` down to its ``new_text`` (``updated`` changes) — all or nothing: a process dying
        midway never leaves ``item`` current beside a memory it replaces."""

    @abstractmethod
    def _refresh(self, change: MemoryChange) -> None:
        """Record a restatement: the memory takes ``change.new_text`` and a new update time."""

    @abstractmethod
    def _forget(self, user_id: str, memory_ids: Sequence[str] | None) -> int:
        """Delete memories and their history (all of the user's for ``None``); the episode log
        keeps their ids, not their text."""

    def _store_decided(
        self,
        read: ActiveRead,
        item: RegistryItem,
        change: MemoryChange,
        retire: Sequence[MemoryChange] = (),
        cut: Sequence[MemoryChange] = (),
    ) -> None:
        """:meth:`_store` of a write decided on ``read``: a backend with transactions refuses it
        (:class:`~memabra._errors.MemoriesChangedError`, nothing written) where another write
        changed the user's memories since that read; one without settles it afterwards (``_settle``)."""
        self._store(item, change, retire, cut)

    def _store_many(self, pairs: Sequence[tuple[RegistryItem, MemoryChange]]) -> None:
        for item, change in pairs:
            self._store(item, change)

    def _active_pairs(self, user_id: str) -> builtins.list[tuple[str, str]]:
        """``(id, text)`` of the user's active memories (backends may answer this cheaper)."""
        return [(i.id, i.text) for i in self.items(user_id)]

    def _known_texts(self, user_id: str) -> builtins.list[str]:
        """Every text the user's memories have or had (retired ones, the text before an update or
        a cut): what an import skips restating. Backends answer it in one read."""
        texts = []
        for record in self.records(user_id, include_retired=True):
            texts.append(record.text)
            for change in self.history(user_id, record.id):
                texts += [t for t in (change.old_text, change.new_text) if t]
        return texts

    def _read_active(self, user_id: str) -> ActiveRead:
        """The read a write decides on; it is handed to ``_fresh_id`` and ``_settle``."""
        return ActiveRead(user_id, tuple(self._active_pairs(user_id)))

    def _fresh_id(self, read: ActiveRead, fact: str) -> str:
        return self.new_id()  # a store without transactions derives it from the fact (StoreMemory)

    def _settle(self, read: ActiveRead, memory_id: str, episode_id: str | None) -> None:
        """After ``remember`` wrote ``memory_id`` on ``read``: a backend whose writes are no
        transactions settles it here with what other processes wrote since that read."""

    # ------------------------------------------------------------------ reading

    def list(self, user_id: str, *, include_retired: bool = True) -> builtins.list[MemoryRecord]:
        return self.records(user_id, include_retired=include_retired)

    def get(self, user_id: str, memory_id: str) -> MemoryRecord:
        for record in self.records(user_id):
            if record.id == memory_id:
                return record
        raise InvalidRecordError(f"user {user_id!r} has no memory {memory_id!r}")

    def recall(self, user_id: str, query: str, *, limit: int = RECALL_LIMIT) -> builtins.list[RegistryItem]:
        """The memories the router is offered for ``query``: all of them up to ``RECALL_ALL``,
        else the ``limit`` best by the hybrid prior."""
        items = self.items(user_id)
        if len(items) <= max(RECALL_ALL, limit):
            return items
        return [item for item, _ in rank(items, query, self.encoder)[:limit]]

    def search(self, user_id: str, query: str, *, limit: int = 10) -> builtins.list[RecalledMemory]:
        """The user's active memories best first for ``query``, by the router's recall."""
        if not query.strip():
            raise InvalidRecordError("search needs a non-empty query")
        pool = self.recall(user_id, query, limit=max(limit, RECALL_LIMIT))
        records = {r.id: r for r in self.records(user_id, include_retired=False)}
        ranked = rank(pool, query, self.encoder)
        return [RecalledMemory(records[i.id], s) for i, s in ranked if i.id in records][:limit]

    def candidates(self, user_id: str, query: str | None = None) -> builtins.list[Candidate]:
        items = self.items(user_id) if query is None else self.recall(user_id, query)
        return [item.as_candidate() for item in items]

    # ------------------------------------------------------------------ writing

    def remember(
        self,
        user_id: str,
        text: str,
        *,
        source: str = "user",
        at: datetime | None = None,
        episode_id: str | None = None,
    ) -> RegistryItem:
        """Store the fact in ``text`` for ``user_id``; a restatement refreshes the stored memory
        and a fact on a subject with one current value retires the one it replaces (of a memory
        joining several facts, only the replaced one is cut out)."""
        with self._writing(user_id):
            return write.remember(self, user_id, text, source=source, at=at, episode_id=episode_id)

    def _left_standing(self, fact: str, text: str) -> str | None:
        return write.left_standing(self, fact, text)

    def remember_many(
        self, user_id: str, texts: Iterable[str], *, source: str = "import", at: datetime | None = None
    ) -> builtins.list[RegistryItem]:
        """``remember`` for many facts at once (an import): restatements of stored memories
        (retired ones too) or of earlier facts are skipped, so the same import run again adds and
        retires nothing; facts that supersede a stored one go through ``remember`` one by one.
        Every text is checked before the first write (an error names the fact's position)."""
        with self._writing(user_id):
            return write.remember_many(self, user_id, texts, source=source, at=at)

    def write_from_message(
        self, user_id: str, message: str, extractor: FactExtractor, *, episode_id: str | None = None
    ) -> builtins.list[RegistryItem]:
        """The runtime's write path: the facts ``extractor`` finds in a user message, remembered. A
        "fact" longer than a memory holds (a model extractor's summary of a pasted document) is
        skipped with a log line, as the rules skip such sentences: the message's other facts stay."""
        facts = [fact for fact in extractor(message) if fact.strip()]
        kept = [fact for fact in facts if not write.too_long(fact)]  # measured as remember() stores it
        if len(kept) < len(facts):
            logger.info(
                "%d fact(s) over %d characters were not remembered: a memory holds at most that many",
                len(facts) - len(kept),
                MAX_MEMORY_CHARS,
            )
        return [self.remember(user_id, fact, episode_id=episode_id) for fact in kept]

    def update(
        self,
        user_id: str,
        memory_id: str,
        text: str,
        *,
        episode_id: str | None = None,
        reason: str = "update",
        replace: bool = False,
        keep_both: bool = False,
    ) -> MemoryRecord:
        """Replace an active memory's text; the old text goes into its history with ``reason`` (who
        or what changed it) and ``episode_id``. A retired memory is refused: rewriting it would make
        it current again beside the fact that replaced it. So is a text stating another value of a
        subject another current memory holds, or restating one
        (:class:`~memabra._memory_write.ContradictsCurrentError` naming them; nothing written): the
        agent would go on answering the old value. ``replace`` retires them (of a memory joining
        several facts, only the replaced one is cut out) in the same write; ``keep_both`` keeps
        them, as ``update`` did before it checked. The rule of
        :func:`~memabra._memory_write.edit_memory` (the CLI's and the admin's edit), which it runs."""
        edited = write.edit_memory(
            self,
            user_id,
            memory_id,
            text,
            replace=replace,
            keep_both=keep_both,
            reason=reason,
            episode_id=episode_id,
        )
        return edited.memory

    def _rewrite(
        self, user_id: str, memory_id: str, fact: str, episode_id: str | None, reason: str, now: datetime
    ) -> None:
        """Cut a memory down to ``fact`` with no check (a settled store write, :mod:`memabra._store_settle`)."""
        old = self._item(user_id, memory_id, include_retired=True)
        item = RegistryItem(
            kind=CandidateKind.MEMORY,
            id=old.id,
            owner=user_id,
            text=fact,
            tokens=approx_tokens(fact),
            name=fact[:60],
            source=old.source,
            metadata=old.metadata,
            created_at=old.created_at,
            updated_at=now,
            last_chosen_at=old.last_chosen_at,
            times_chosen=old.times_chosen,
            times_used=old.times_used,
        )
        self._store(
            item, MemoryChange(memory_id, user_id, MemoryAction.UPDATED, now, old.text, fact, episode_id, reason)
        )

    def retire(
        self,
        user_id: str,
        memory_id: str,
        *,
        reason: str = "retired by hand",
        at: datetime | None = None,
        episode_id: str | None = None,
    ) -> MemoryRecord:
        """Stop recalling a memory without forgetting it: it keeps its text and history and can be
        restored; ``reason`` and ``episode_id`` (the episode whose feedback retracted it) go into its
        history. Raises :class:`~memabra.InvalidRecordError` if the user has no such memory or it is
        already retired. :class:`SQLMemory` and :class:`~memabra.StoreMemory` implement it; a backend
        of your own overrides it (the six primitives hold no retirement without a new fact)."""
        raise ConfigError(
            f"{type(self).__name__} cannot retire a memory: override MemoryBackend.retire "
            "(docs/memory.md, 'Your own memory backend'), or forget the memory instead"
        )

    def forget(self, user_id: str, memory_id: str) -> None:
        """Delete one memory and its history; it leaves every future candidate set."""
        with self._writing(user_id):
            self._forget(user_id, [memory_id])

    def forget_all(self, user_id: str) -> int:
        """Delete every memory of ``user_id`` with its history; returns how many."""
        with self._writing(user_id):
            return self._forget(user_id, None)

    def put(self, item: RegistryItem) -> None:
        """Insert or replace one memory as given (no extraction, no supersession)."""
        with self._writing(item.owner):
            self._store(
                item,
                MemoryChange(
                    item.id,
                    item.owner,
                    MemoryAction.CREATED,
                    item.updated_at or self.clock(),
                    None,
                    item.text,
                    None,
                    "put",
                ),
            )

    def _writing(self, user_id: str) -> AbstractContextManager[None]:
        """Held around every read-then-write of ``user_id``'s memories (``remember``, ``update``,
        a restore, ...): a backend without transactions makes the user's writers in this process
        take turns here; a SQL backend needs nothing (its writes are transactions)."""
        return nullcontext()

    def _item(self, user_id: str, memory_id: str, *, include_retired: bool) -> RegistryItem:
        record = self.get(user_id, memory_id)
        if record.status is MemoryStatus.RETIRED and not include_retired:
            raise InvalidRecordError(f"memory {memory_id!r} is retired")
        return RegistryItem(
            kind=CandidateKind.MEMORY,
            id=record.id,
            owner=user_id,
            text=record.text,
            tokens=approx_tokens(record.text),
            name=record.text[:60],
            source=record.source,
            created_at=record.created_at,
            updated_at=record.updated_at,
            last_chosen_at=record.last_used_at,
            times_chosen=record.times_chosen,
            times_used=record.times_used,
        )
