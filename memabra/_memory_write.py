"""The write path of :class:`~memabra._memory.MemoryBackend`: ``remember`` and ``remember_many``.

A write reads the user's active memories once (:class:`ActiveRead`) and hands that read on, to
pick the new memory's id and, after the write, to the backend's settling: a LangGraph store has no
transactions and settles the write against what it read (:mod:`memabra._store_settle`). The read
travels as a value, never through per-thread state, so a write made between another write's read
and its store (another user's, on the same thread) cannot pair either with the wrong read.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from memabra._errors import InvalidRecordError, MemoriesChangedError
from memabra._facts import join_facts, split_facts
from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus
from memabra._memory_text import audit_reason, clean, require_user, too_long
from memabra._records import CandidateKind, RegistryItem
from memabra._restatement import is_restatement
from memabra._text import approx_tokens

if TYPE_CHECKING:
    from memabra._memory import MemoryBackend

__all__ = [
    "ActiveRead",
    "ContradictsCurrentError",
    "CountsWrites",
    "EditedMemory",
    "audit_reason",
    "clashing_memories",
    "clean",
    "decided_again",
    "edit_memory",
    "left_standing",
    "remember",
    "remember_many",
    "require_user",
    "too_long",
    "write_new",
]

logger = logging.getLogger("memabra")

_T = TypeVar("_T")

# Reads one ``remember`` makes while other processes keep retiring the memory it restates.
_RESTATE_TRIES = 3
# Tries of a write whose read another writer changed before it committed: each meets one more
# write to the same user's memories, so running out means a user written continuously elsewhere
# (eight writers of one user at once all got through in the tests).
_WRITE_TRIES = 10
# Writers that met each other wait a random moment, growing with each try, so they stop meeting.
_RETRY_WAIT_S = 0.002


@dataclass(frozen=True, slots=True)
class ActiveRead:
    """One read of ``user_id``'s active memories as ``(id, text)`` pairs, made for one write and
    passed to it; a backend may subclass it with what it settles that write against."""

    user_id: str
    pairs: tuple[tuple[str, str], ...]
    # the backend's count of the user's writes as the read began (CountsWrites), else None: a write
    # decided on the read commits only while no other write has moved it
    generation: int | None = field(default=None, kw_only=True)


def remember(
    backend: MemoryBackend, user_id: str, text: str, *, source: str, at: datetime | None, episode_id: str | None
) -> RegistryItem:
    """:meth:`MemoryBackend.remember`, under the backend's ``_writing`` turn: decided on a read of
    the user's memories and, where another writer wrote between that read and the write, decided
    again on a new read (:class:`MemoriesChangedError` after :data:`_WRITE_TRIES`)."""
    require_user(user_id)
    fact = clean(text)
    now = at or backend.clock()
    for attempt in range(1, _WRITE_TRIES):
        try:
            return _remember_once(backend, user_id, fact, source=source, now=now, episode_id=episode_id)
        except MemoriesChangedError:
            logger.debug("user %s's memories changed under a write: deciding it again", user_id)
            time.sleep(random.uniform(0, _RETRY_WAIT_S * attempt))
    return _remember_once(backend, user_id, fact, source=source, now=now, episode_id=episode_id)


def _remember_once(
    backend: MemoryBackend, user_id: str, fact: str, *, source: str, now: datetime, episode_id: str | None
) -> RegistryItem:
    # Another process may retire the restated memory between this read and the refresh (its user
    # stated a new value there): read again, and the fact is stored as the newest value.
    for _ in range(_RESTATE_TRIES):
        read = backend._read_active(user_id)
        same = next((mid for mid, stored in read.pairs if is_restatement(fact, stored)), None)
        if same is None:
            break
        old_text = dict(read.pairs)[same]
        change = MemoryChange(same, user_id, MemoryAction.REFRESHED, now, old_text, fact, episode_id, "restated")
        try:
            backend._refresh(change)
        except InvalidRecordError:
            if backend.get(user_id, same).status is not MemoryStatus.RETIRED:
                raise
            continue
        refreshed = backend._item(user_id, same, include_retired=False)
        backend._settle(read, same, episode_id)
        return refreshed
    item, _, _ = write_new(backend, user_id, fact, source=source, now=now, episode_id=episode_id, read=read)
    return item


def write_new(
    backend: MemoryBackend,
    user_id: str,
    fact: str,
    *,
    source: str,
    now: datetime,
    episode_id: str | None,
    read: ActiveRead,
) -> tuple[RegistryItem, builtins.list[MemoryChange], builtins.list[MemoryChange]]:
    """Store ``fact`` (no restatement of ``read``) as a new memory, retiring the memories of
    ``read`` it supersedes and cutting it out of those joining it with other facts, in one write;
    the new memory, the retirements and the cuts."""
    active = list(read.pairs)
    texts = dict(active)
    item = new_item(user_id, fact, source, now, backend._fresh_id(read, fact))
    retire_ids = backend.supersession.superseded(fact, active) if active else []
    retire: builtins.list[MemoryChange] = []
    trimmed: builtins.list[tuple[str, str]] = []
    for mid in dict.fromkeys(retire_ids):
        if mid not in texts:
            continue
        rest = left_standing(backend, fact, texts[mid])
        if rest is None:
            why = f"superseded by {item.id}"
            retire.append(MemoryChange(mid, user_id, MemoryAction.RETIRED, now, texts[mid], None, episode_id, why))
        elif rest:
            trimmed.append((mid, rest))
    created = MemoryChange(item.id, user_id, MemoryAction.CREATED, now, None, fact, episode_id, source)
    why = f"part superseded by {item.id}"
    cut = [
        MemoryChange(mid, user_id, MemoryAction.UPDATED, now, texts[mid], rest, episode_id, why)
        for mid, rest in trimmed
    ]
    # The new fact, its retirements and its cuts in one write: a process dying in between must
    # not leave "I moved to Hobart" current beside an uncut "I live in Lyon and my dog is called Rex",
    # which a re-run import would skip repairing (it knows the new fact already).
    backend._store_decided(read, item, created, retire, cut)
    if retire:
        logger.info("memory %s retires %s for user %s", item.id, ", ".join(c.memory_id for c in retire), user_id)
    for c in cut:
        logger.info("memory %s replaces part of %s for user %s", item.id, c.memory_id, user_id)
    backend._settle(read, item.id, episode_id)
    return item, retire, cut


class ContradictsCurrentError(InvalidRecordError):
    """An edit refused because its new text contradicts (or restates) other current memories,
    named in ``clashing`` as ``(id, text)``: a form can offer to replace or keep them."""

    def __init__(self, message: str, clashing: Sequence[tuple[str, str]]) -> None:
        super().__init__(message)
        self.clashing = tuple(clashing)


@dataclass(frozen=True, slots=True)
class EditedMemory:
    """An edited memory and what the edit changed besides: the current memories it retired and
    those it cut its new fact's subject out of (both empty unless the edit replaced them)."""

    memory: MemoryRecord
    retired: tuple[str, ...] = ()
    trimmed: tuple[str, ...] = ()


def edit_memory(
    backend: MemoryBackend,
    user_id: str,
    memory_id: str,
    text: str,
    *,
    replace: bool = False,
    keep_both: bool = False,
    reason: str = "update",
    at: datetime | None = None,
    episode_id: str | None = None,
) -> EditedMemory:
    """Replace an active memory's text by hand (``memabra memories update``, the admin's edit)
    under the rule a restore keeps: never two current values of one subject. An edit is a new
    fact, yet :meth:`MemoryBackend.update` rewrites in place without the write path's
    supersession, so a support engineer turning "I'm moving to Oslo" into "I live in Oslo" left
    "I live in Hobart" current beside it, and the agent went on answering Hobart. Refused
    (:class:`~memabra.InvalidRecordError`, nothing written) while another current memory states
    another value of the new text's subject, or restates it; ``replace`` retires those (or cuts
    the replaced fact out of a memory joining several) in the same write, ``keep_both`` keeps
    them (the two are about different things). ``reason`` goes into the history as given (see
    :func:`audit_reason`); ``episode_id``, the episode the edit came from (None: by hand), goes
    into every change it makes. Works on any backend: it uses only what :class:`MemoryBackend`
    defines, and :meth:`MemoryBackend.update` is this rule too.

    Decided on one read of the user's memories, as ``remember`` is: where another write (the
    agent storing what the user just said) lands between that read and this write, a backend
    with transactions refuses the write and the edit is decided again on a new read, so the fact
    that write stored is checked too and never left current beside the edit."""
    if replace and keep_both:
        raise InvalidRecordError("replace and keep_both exclude each other: retire what it contradicts, or keep it")
    require_user(user_id)
    fact = clean(text)
    reason = audit_reason(reason)
    now = at or backend.clock()
    with backend._writing(user_id):
        done = decided_again(
            user_id,
            "an edit",
            lambda: _edit_once(backend, user_id, memory_id, fact, replace, keep_both, reason, now, episode_id),
        )
    if done.retired or done.trimmed:
        replaced = ", ".join([*done.retired, *done.trimmed])
        logger.info("edited memory %s of user %s replaces %s", memory_id, user_id, replaced)
    return done


def decided_again(user_id: str, what: str, once: Callable[[], _T]) -> _T:
    """``once()``, a write decided on one read of ``user_id``'s memories, run again on a new read
    wherever another write made that read stale (:class:`MemoriesChangedError`, nothing written),
    at most :data:`_WRITE_TRIES` times: an edit's and a restore's rule, never two current values
    of one subject however the writes interleave."""
    for attempt in range(1, _WRITE_TRIES):
        try:
            return once()
        except MemoriesChangedError:
            logger.debug("user %s's memories changed under %s: deciding it again", user_id, what)
            time.sleep(random.uniform(0, _RETRY_WAIT_S * attempt))
    return once()


def _edit_once(
    backend: MemoryBackend,
    user_id: str,
    memory_id: str,
    fact: str,
    replace: bool,
    keep_both: bool,
    reason: str,
    now: datetime,
    episode_id: str | None,
) -> EditedMemory:
    read = backend._read_active(user_id)  # first: a write from here on refuses this one
    record = backend.get(user_id, memory_id)
    if record.status is MemoryStatus.RETIRED:
        by = f" (superseded by {record.superseded_by})" if record.superseded_by else ""
        raise InvalidRecordError(
            f"memory {memory_id!r} is retired{by}: restore it first (memabra memories restore), then update it"
        )
    if fact == record.text:
        return EditedMemory(record)  # the same text again (a re-sent form): nothing to record
    clashing = [] if keep_both else clashing_memories(backend, fact, [p for p in read.pairs if p[0] != memory_id])
    if clashing and not replace:
        listing = ", ".join(f"{mid} ({old!r})" for mid, old in clashing)
        raise ContradictsCurrentError(
            f"the new text {fact!r} contradicts the current {listing}; saving it would leave both current: "
            "edit with replace (--replace) to retire that in the same step, or with keep_both (--keep-both) "
            "if the two are about different things",
            clashing,
        )
    whole: builtins.list[MemoryChange] = []
    cut: builtins.list[MemoryChange] = []
    for mid, old in clashing:
        rest = None if is_restatement(fact, old) else left_standing(backend, fact, old)
        if rest is None:
            why = f"superseded by {memory_id} (edited)"
            whole.append(MemoryChange(mid, user_id, MemoryAction.RETIRED, now, old, None, episode_id, why))
        elif rest:
            why = f"part superseded by {memory_id} (edited)"
            cut.append(MemoryChange(mid, user_id, MemoryAction.UPDATED, now, old, rest, episode_id, why))
    base = backend._item(user_id, memory_id, include_retired=False)
    item = dataclasses.replace(base, text=fact, tokens=approx_tokens(fact), name=fact[:60], updated_at=now)
    change = MemoryChange(memory_id, user_id, MemoryAction.UPDATED, now, record.text, fact, episode_id, reason)
    # the edit, the retirements and the cuts: one write, all or nothing, refused if `read` went stale
    backend._store_decided(read, item, change, whole, cut)
    return EditedMemory(
        backend.get(user_id, memory_id), tuple(c.memory_id for c in whole), tuple(c.memory_id for c in cut)
    )


def clashing_memories(
    backend: MemoryBackend, fact: str, current: Sequence[tuple[str, str]]
) -> builtins.list[tuple[str, str]]:
    """The ``(id, text)`` of ``current`` that ``fact`` supersedes or restates, in their order."""
    if not current:
        return []
    ids = set(backend.supersession.superseded(fact, list(current)))
    return [(mid, old) for mid, old in current if mid in ids or is_restatement(fact, old)]


def left_standing(backend: MemoryBackend, fact: str, text: str) -> str | None:
    """What stays true of a memory ``fact`` supersedes: None when all of it is replaced, else the
    facts it joins that ``fact`` leaves standing ("" when it replaces none of them)."""
    parts = split_facts(text)
    if len(parts) < 2:
        return None
    replaced = set(backend.supersession.superseded(fact, [(str(i), p) for i, p in enumerate(parts)]))
    rest = [p for i, p in enumerate(parts) if str(i) not in replaced]
    if not rest:
        return None
    return join_facts(rest) if len(rest) < len(parts) else ""


def remember_many(
    backend: MemoryBackend, user_id: str, texts: Iterable[str], *, source: str, at: datetime | None
) -> builtins.list[RegistryItem]:
    """:meth:`MemoryBackend.remember_many`, under the backend's ``_writing`` turn
    (:mod:`memabra._memory_import`)."""
    from memabra._memory_import import remember_many as import_facts  # it builds on this module

    return import_facts(backend, user_id, texts, source=source, at=at)


@runtime_checkable
class CountsWrites(Protocol):
    """A backend that counts the writes to each user's memories, in the writes' own transactions,
    one per ``_store`` / ``_store_many`` (:class:`~memabra._sql_memory.SQLMemory`: the registry's
    generation), gives its reads their ``generation``, refuses a ``_store_decided`` or
    ``_store_many_decided`` whose read's count moved (:class:`MemoriesChangedError`, nothing
    written), and whose ``_fresh_id`` and ``_settle`` need nothing of a read but its pairs."""

    def _write_count(self, user_id: str) -> int: ...

    def _store_many_decided(self, read: ActiveRead, pairs: Sequence[tuple[RegistryItem, MemoryChange]]) -> None:
        """``_store_many`` of new memories of ``read``'s user decided on ``read``: one write."""


def new_item(user_id: str, fact: str, source: str, now: datetime, unique: str) -> RegistryItem:
    require_user(user_id)
    return RegistryItem(
        kind=CandidateKind.MEMORY,
        id=f"mem:{unique[:16]}",
        owner=user_id,
        text=fact,
        tokens=approx_tokens(fact),
        name=fact[:60],
        source=source,
        created_at=now,
    )
