"""``remember_many``: many facts of one user at once (an import, a chunk of ``memories import``).

The facts are decided on one read of the user's memories, kept up to date with the import's own
writes: each fact that restates a text the user's memories have or had (or an earlier fact) is
skipped, one on a subject no memory states yet joins the pending facts, inserted together in one
write, and one that may retire or cut a memory is written on its own, after the pending ones
(``write_new``, or ``remember`` where another process wrote since the read).

On a backend that counts the writes to a user's memories (:class:`CountsWrites`, the SQL
registry), every write commits only while that count has not moved since the read it was decided
on, the pending insert included: an agent that stored "I live in Hobart" after the import's read
would otherwise stay current beside the import's "I live in Perth" (a fact both stored would be
there twice, a fact the agent retired meanwhile current again). A write that finds the count moved
writes nothing; the import reads the user again and decides the facts not yet written again, in
file order. A backend that counts nothing (a LangGraph store) settles its writes afterwards
instead (:mod:`memabra._store_settle`).
"""

from __future__ import annotations

import builtins
import logging
import random
import time
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, cast

from memabra._errors import InvalidRecordError, MemoriesChangedError
from memabra._facts import fact_subjects
from memabra._memory_records import MemoryAction, MemoryChange
from memabra._memory_write import _RETRY_WAIT_S, _WRITE_TRIES, ActiveRead, CountsWrites, clean, new_item, write_new
from memabra._records import RegistryItem
from memabra._restatement import RestatementIndex, is_restatement

if TYPE_CHECKING:
    from memabra._memory import MemoryBackend

__all__ = ["remember_many"]

logger = logging.getLogger("memabra")


class _Decision(Enum):
    SKIP = "skip"  # restates a known text or an earlier fact
    PLAIN = "plain"  # a subject no current memory states: inserted with the other pending facts
    SUPERSEDE = "supersede"  # may retire or cut a current memory: written on its own


def remember_many(
    backend: MemoryBackend, user_id: str, texts: Iterable[str], *, source: str, at: datetime | None
) -> builtins.list[RegistryItem]:
    """:meth:`MemoryBackend.remember_many`, under the backend's ``_writing`` turn."""
    now = at or backend.clock()
    if not isinstance(user_id, str) or not user_id:
        raise InvalidRecordError("memories are scoped by user: give a non-empty user_id")
    facts = _cleaned_all(texts)  # every fact checked before the first write
    return _Import(backend, user_id, source, now).run(facts)


class _Import:
    """One ``remember_many``: the read its facts are decided on, and what it wrote so far.

    ``remember`` reads the user's active memories before each write; on the SQL registry that read
    visits every memory the user ever had, retired ones too (there is no index on the
    retirement), so an import of one user's thousands of facts on the same subjects, each retiring
    the one before, slowed down fact by fact. Here the read is made once and kept up to date with
    the import's own writes; before each write that may retire or cut, one key lookup of the
    backend's write count says whether another process wrote meanwhile (an agent serving the
    user), and only then is it read again. A backend that counts no writes is read before each
    such write, as ``remember`` does."""

    def __init__(self, backend: MemoryBackend, user_id: str, source: str, now: datetime) -> None:
        self._backend, self._user_id, self._source, self._now = backend, user_id, source, now
        self._counts = isinstance(backend, CountsWrites)
        self._pending: builtins.list[str] = []
        self._out: builtins.list[RegistryItem] = []
        self._read_all()

    # ------------------------------------------------------------------ the read

    def _read_all(self) -> None:
        """Read the user's active memories (the write count first: a write during the reads moves
        it) and every text their memories have or had: what the facts are decided on."""
        self._read_active()
        # Retired memories count as known: an import run again (after it was killed, or by
        # mistake) must not bring back a fact that a later line of the same file superseded the
        # first time.
        self._seen = RestatementIndex(self._backend._known_texts(self._user_id))
        self._subjects: set[str] = set().union(*(fact_subjects(text) for text in self._pairs.values()))

    def _read_active(self) -> None:
        self._read = self._backend._read_active(self._user_id)
        self._expected = self._read.generation if self._counts else None
        self._pairs: dict[str, str] = dict(self._read.pairs)

    def _current(self) -> bool:
        return cast(CountsWrites, self._backend)._write_count(self._user_id) == self._expected

    def _decided_read(self) -> ActiveRead:
        return ActiveRead(self._user_id, tuple(self._pairs.items()), generation=self._expected)

    # ------------------------------------------------------------------ deciding and writing

    def run(self, facts: builtins.list[str]) -> builtins.list[RegistryItem]:
        todo = deque(facts)
        conflicts = 0
        while todo or self._pending:
            fact = todo.popleft() if todo else None
            if fact is not None:
                decision = self._decide(fact)
                if decision is _Decision.SKIP:
                    continue
                if decision is _Decision.PLAIN:
                    self._pending.append(fact)
                    continue
            # a fact that may retire or cut, or the end: the pending facts, before it in the
            # file, are written first
            if not self._store_pending():
                conflicts += 1
                if conflicts >= _WRITE_TRIES:
                    raise MemoriesChangedError(
                        f"user {self._user_id!r}'s memories changed since the read this import was decided "
                        f"on, {conflicts} times: another process keeps writing them; run the import again"
                    )
                logger.debug("user %s's memories changed under an import: deciding it again", self._user_id)
                todo.extendleft(reversed([*self._pending, *([] if fact is None else [fact])]))
                self._pending = []
                time.sleep(random.uniform(0, _RETRY_WAIT_S * conflicts))
                self._read_all()
                continue
            conflicts = 0
            if fact is not None:
                self._out.append(self._supersede(fact))
        return self._out

    def _decide(self, fact: str) -> _Decision:
        negates = self._seen.negates(fact)  # "I'm not vegetarian now" after "I'm vegetarian"
        if not self._seen.add(fact):
            return _Decision.SKIP
        found = fact_subjects(fact)
        if found & self._subjects or negates:
            return _Decision.SUPERSEDE
        self._subjects |= found
        return _Decision.PLAIN

    def _store_pending(self) -> bool:
        """Insert the pending facts in one write; False (nothing written) where another process
        wrote to the user's memories since the read they were decided on."""
        if not self._pending:
            return True
        backend, user_id, now, source = self._backend, self._user_id, self._now, self._source
        plain: builtins.list[tuple[RegistryItem, MemoryChange]] = []
        for fact in self._pending:
            item = new_item(user_id, fact, source, now, backend._fresh_id(self._read, fact))
            plain.append((item, MemoryChange(item.id, user_id, MemoryAction.CREATED, now, None, fact, None, source)))
        if self._expected is None:
            backend._store_many(plain)
        else:
            try:
                cast(CountsWrites, backend)._store_many_decided(self._decided_read(), plain)
            except MemoriesChangedError:
                return False
            self._expected += 1
        self._pending = []
        self._pairs.update((item.id, item.text) for item, _ in plain)
        self._out.extend(item for item, _ in plain)
        return True

    def _supersede(self, fact: str) -> RegistryItem:
        """``remember(fact)``, on the kept read while no other process wrote since."""
        backend, user_id = self._backend, self._user_id
        if self._expected is not None and not self._current():
            self._reread()
            self._seen.add(fact)  # a later restatement of it in the import is skipped, not refreshed
        # a restatement here is of a memory another process stored since the known texts were
        # read: remember() refreshes it
        if self._expected is None or any(is_restatement(fact, stored) for stored in self._pairs.values()):
            return self._remember(fact)
        try:
            item, retire, cut = write_new(
                backend, user_id, fact, source=self._source, now=self._now, episode_id=None, read=self._decided_read()
            )
        except MemoriesChangedError:  # another process wrote since the check: decide on its write too
            return self._remember(fact)
        for change in retire:
            self._pairs.pop(change.memory_id, None)
        for change in cut:
            self._pairs[change.memory_id] = change.new_text or ""
            # what is left of a memory a fact was cut out of is known, as it is to an import run
            # again: a later "I'm allergic to nuts" restates what "My name is Ann and I'm allergic
            # to nuts" became, it is not stored beside it
            self._seen.add(change.new_text or "")
        self._subjects |= fact_subjects(fact)
        self._pairs[item.id] = item.text
        self._expected += 1
        return item

    def _remember(self, fact: str) -> RegistryItem:
        item = self._backend.remember(self._user_id, fact, source=self._source, at=self._now)
        self._reread()  # that write stored, retired and cut memories since the read
        return item

    def _reread(self) -> None:
        """Read again after another process wrote: on a backend that counts writes, everything the
        facts not yet written are decided on (the next insert commits on this read); else the
        active memories, as before each write of ``remember``."""
        if self._counts:
            self._read_all()
        else:
            self._read_active()
            # what that write left is known now, as to an import run again: what remains of a memory
            # a fact was cut out of ("I'm allergic to nuts" of "My name is Ann and I'm allergic to
            # nuts") must not be inserted beside it by a later line of the import restating it
            for text in self._pairs.values():
                self._seen.add(text)


def _cleaned_all(texts: Iterable[str]) -> builtins.list[str]:
    facts = []
    for n, text in enumerate(texts, start=1):
        try:
            facts.append(clean(text))
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"fact {n} of the import: {exc}; nothing was written") from None
    return facts
