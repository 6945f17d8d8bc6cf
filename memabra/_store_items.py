"""Store items and history entries as :class:`~memabra.StoreMemory` writes and reads them: the
item shapes it reads, user ids as namespace labels, and a change's history entry."""

from __future__ import annotations

import hashlib
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from memabra._errors import InvalidRecordError
from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus, storable_user
from memabra._records import RegistryItem, new_id
from memabra._text import approx_tokens
from memabra.router._text import CJK_CHARACTER

__all__ = [
    "CREATED",
    "PENDING",
    "created_at_of",
    "with_created",
    "change_from",
    "change_order",
    "change_texts",
    "aware",
    "change_value",
    "cut_value",
    "cuts",
    "uncut",
    "fact_key",
    "fresh_key",
    "history_entry",
    "item_value",
    "memory_record",
    "stored_tokens",
    "new_record",
    "retirements",
    "unfinished",
    "memory_text",
    "names_others",
    "next_seq",
    "pending_change",
    "readable_text",
    "seq_of",
    "retirement_key",
    "user_label",
    "version",
    "written",
]

# The item's latest change, written in the same put as the item: the history entry is a second
# put, and a process dying between the two leaves it here (read by ``history``, repaired by the
# next write).
PENDING = "memabra_change"
# The memory's creation time, carried from put to put: InMemoryStore and SqliteStore give an item
# a new ``created_at`` at every put (PostgresStore keeps the first), so a memory refreshed,
# updated or retired would read as created then.
CREATED = "memabra_created_at"
_seq_lock = threading.Lock()
_last_seq = 0


def created_at_of(item: Any) -> datetime:
    """When the memory a store item holds was created: the time memabra carried (:data:`CREATED`),
    else the store's own ``created_at`` (an item written once, or by a memabra that did not carry it)."""
    value = item.value if isinstance(item.value, Mapping) else {}
    carried = value.get(CREATED)
    if isinstance(carried, str):
        try:
            return aware(datetime.fromisoformat(carried))
        except ValueError:
            pass
    return aware(item.created_at)


def with_created(value: dict[str, Any], current: Any) -> dict[str, Any]:
    """``value`` to put over the stored item ``current`` (``None``: a new memory), carrying its
    creation time."""
    return value if current is None else {**value, CREATED: created_at_of(current).isoformat()}


def memory_text(value: Mapping[str, Any], *, where: str = "") -> str:
    """The text of a store item in any of the shapes this module reads (see the module doc)."""
    text = value.get("text")
    if isinstance(text, str) and text.strip():
        return text.strip()
    content = value.get("content")
    if isinstance(content, str) and content.strip():
        return content.strip()
    if isinstance(content, Mapping):
        for key in ("content", "text", "memory", "fact"):
            inner = content.get(key)
            if isinstance(inner, str) and inner.strip():
                return inner.strip()
        fields = [f"{k}: {v}" for k, v in content.items() if isinstance(v, (str, int, float, bool)) and str(v).strip()]
        if fields:
            return "; ".join(fields)
    keys = ", ".join(sorted(map(str, value))) or "none"
    raise InvalidRecordError(
        f"memabra cannot read the store item {where or '(unnamed)'}: it needs a 'text' or 'content' string, or a "
        f"'content' object with a 'content' string or scalar fields; its keys are: {keys}"
    )


def user_label(user_id: str) -> str:
    """``user_id`` as a namespace label. LangGraph refuses labels with '.': such an id is stored
    percent-escaped ('%' -> '%25', '.' -> '%2E'); any other id as it is (where LangMem puts it too).
    An id holding '%2E' itself would read as another user's, and one the episode log cannot store
    as given (a NUL byte, a lone surrogate: ``"a\\x00nn"`` is logged as ``"ann"``, whose episodes a
    turn's corrections would then land on) is refused."""
    storable_user(user_id)
    if "." in user_id:
        return user_id.replace("%", "%25").replace(".", "%2E")
    for escape in ("%2E", "%00"):
        if escape in user_id:
            raise InvalidRecordError(
                f"the user id {user_id!r} cannot name a store namespace: it holds {escape!r}, which memabra "
                "writes for '.' or NUL in user ids (LangGraph stores refuse those in a namespace label)"
            )
    return user_id


def pending_change(value: object) -> dict[str, Any] | None:
    found = value.get(PENDING) if isinstance(value, Mapping) else None
    return dict(found) if isinstance(found, Mapping) and found.get("key") and found.get("at") else None


def new_record(change: MemoryChange) -> dict[str, Any]:
    """``change`` as written with its item and as its history entry (under ``key``)."""
    return {**change_value(change), "key": f"{change.memory_id}-{new_id()[:12]}", "seq": next_seq()}


def history_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("retires", "cuts")}


def retirements(pending: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The change records of the memories the change ``pending`` retires."""
    return _records(pending.get("retires"))


def cuts(pending: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The change records (``updated``) of the memories the change ``pending`` cuts a replaced
    fact out of: each ``new_text`` is what stays of the memory's ``old_text``."""
    return [r for r in _records(pending.get("cuts")) if isinstance(r.get("new_text"), str)]


def item_value(item: RegistryItem) -> dict[str, Any]:
    """The store item of a current memory as :class:`~memabra.StoreMemory` writes it: memabra's
    ``text`` beside LangMem's ``{"kind": "Memory", "content": ...}`` shape."""
    return {
        "text": item.text,
        "kind": "Memory",
        "content": {"content": item.text},
        "tokens": item.tokens,
        "source": item.source,
        "name": item.name,
        "status": "active",
    }


def cut_value(value: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The item ``value`` cut down to ``text``, as :meth:`~memabra.StoreMemory.update` writes it."""
    source = value.get("source", "store")
    return {
        "text": text,
        "kind": "Memory",
        "content": {"content": text},
        "tokens": approx_tokens(text),
        "source": str(source),
        "name": text[:60],
        "status": "active",
    }


def _records(found: object) -> list[dict[str, Any]]:
    return [dict(r) for r in found if isinstance(r, Mapping) and r.get("key")] if isinstance(found, list) else []


def uncut(value: object, cut: Mapping[str, Any]) -> bool:
    """Whether the item ``value`` still waits for ``cut``: current, with the text the cut was
    decided on, and not written since the cut's change was made."""
    return (
        isinstance(value, Mapping)
        and value.get("status") != "retired"
        and readable_text(value) == cut.get("old_text")
        and seq_of((pending_change(value) or {}).get("seq")) < seq_of(cut.get("seq"))
    )


def names_others(value: object) -> bool:
    """Whether an item's latest change retires or cuts other memories (to finish, if cut short)."""
    pending = pending_change(value) or {}
    return bool(retirements(pending) or cuts(pending))


def unfinished(items: Iterable[tuple[str, object]]) -> bool:
    """Whether a memory among ``(key, value)`` items names the retirement of another one still
    current and not written since, or a cut of one still waiting for it (a writer died between
    the puts)."""
    items = list(items)
    values = dict(items)
    current = {
        key: seq_of((pending_change(v) or {}).get("seq"))
        for key, v in items
        if isinstance(v, Mapping) and v.get("status") != "retired"
    }
    for _, v in items:
        pending = pending_change(v)
        if pending is None:
            continue
        if any(
            r["memory_id"] in current and current[r["memory_id"]] < seq_of(r.get("seq")) for r in retirements(pending)
        ):
            return True
        if any(uncut(values.get(str(r.get("memory_id"))), r) for r in cuts(pending)):
            return True
    return False


def fact_key(user_id: str, fact: str, n: int = 0) -> str:
    """The key of a new memory stating ``fact``: from the user and the fact's words (case, spacing
    and punctuation aside), so that processes storing one fact at once write one item; ``n`` counts
    the memories of that fact already stored (retired since)."""
    words = " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", fact).casefold()))
    return hashlib.sha256(f"{user_id}\x00{words}\x00{n}".encode()).hexdigest()[:16]


def fresh_key(user_id: str, fact: str, taken: Callable[[str], bool]) -> str:
    """The first of ``fact``'s keys whose memory id (``mem:`` and the key) is not ``taken``."""
    n = 0
    while taken(f"mem:{fact_key(user_id, fact, n)}"):
        n += 1
    return fact_key(user_id, fact, n)


def version(value: object, updated_at: datetime | None) -> str:
    """Which write of an item was read: its latest change's key (any write by memabra), else when
    the store last wrote it."""
    found = pending_change(value)
    return str(found["key"]) if found is not None else f"@{updated_at}"


def written(value: object, key: str) -> tuple[int, str]:
    """The order in which memories written by different processes are settled: their latest
    change's ``seq`` (the writer's clock, in nanoseconds), then the key."""
    return seq_of((pending_change(value) or {}).get("seq")), key


def retirement_key(memory_id: str, read: str) -> str:
    """The history key of the retirement of ``memory_id`` as written at version ``read``: a store
    cannot check and write at once, so two processes may each find that write current and retire
    it (one settling a pair, the other replacing it in ``remember``); they write this one entry."""
    return f"{memory_id}-retired-{hashlib.sha256(read.encode()).hexdigest()[:12]}"


def aware(at: datetime) -> datetime:
    # SqliteStore reads its timestamps (UTC) back without a zone
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


def change_texts(values: Iterable[object]) -> set[str]:
    return {str(t) for v in values if isinstance(v, Mapping) for t in (v.get("old_text"), v.get("new_text")) if t}


def next_seq() -> int:
    """Orders changes written at the same ``at`` (a given time, a coarse clock): nanoseconds,
    increasing within a process."""
    global _last_seq
    with _seq_lock:
        _last_seq = max(time.time_ns(), _last_seq + 1)
        return _last_seq


def change_order(pair: tuple[MemoryChange, int]) -> tuple[datetime, int]:
    return pair[0].at, pair[1]


def seq_of(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def readable_text(value: object) -> str | None:
    """An item's text, or None for a shape memabra cannot read (forgetting it must still work)."""
    if not isinstance(value, Mapping):
        return None
    try:
        return memory_text(value)
    except InvalidRecordError:
        return None


def change_value(c: MemoryChange) -> dict[str, Any]:
    return {
        "memory_id": c.memory_id,
        "action": c.action.value,
        "at": c.at.isoformat(),
        "old_text": c.old_text,
        "new_text": c.new_text,
        "episode_id": c.episode_id,
        "reason": c.reason,
    }


def change_from(user_id: str, v: object, *, where: str = "") -> MemoryChange:
    """A history entry as a change; an entry of another shape is an error naming it."""
    try:
        if not isinstance(v, Mapping):
            raise TypeError("not an object")
        return MemoryChange(
            memory_id=str(v["memory_id"]),
            user_id=user_id,
            action=MemoryAction(v["action"]),
            at=datetime.fromisoformat(str(v["at"])),
            old_text=_text_or_none(v.get("old_text")),
            new_text=_text_or_none(v.get("new_text")),
            episode_id=_text_or_none(v.get("episode_id")),
            reason=str(v.get("reason", "")),
        )
    except (KeyError, ValueError, TypeError) as exc:
        keys = ", ".join(sorted(map(str, v))) if isinstance(v, Mapping) else type(v).__name__
        raise InvalidRecordError(
            f"memabra cannot read the history entry {where or '(unnamed)'}: it needs 'memory_id', an 'action' of "
            f"{', '.join(a.value for a in MemoryAction)} and an ISO 'at' ({exc!r}); it has: {keys}"
        ) from exc


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def memory_record(user_id: str, item: RegistryItem, value: Mapping[str, Any], used: datetime | None) -> MemoryRecord:
    retired = bool(item.metadata.get("status"))
    superseded_by = value.get("superseded_by")
    return MemoryRecord(
        id=item.id,
        user_id=user_id,
        text=item.text,
        status=MemoryStatus.RETIRED if retired else MemoryStatus.ACTIVE,
        created_at=item.created_at,
        updated_at=item.updated_at or item.created_at,
        last_used_at=used,
        superseded_by=superseded_by if isinstance(superseded_by, str) else None,
        source=item.source,
    )


def stored_tokens(value: object, text: str) -> int:
    """The item's stored count, or its text's where it has none, or where the text is in a script
    written without spaces: memabra stored those before it counted their characters (a sentence of
    Chinese was one word), and a store's items cannot be recounted by a schema migration."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0 and not CJK_CHARACTER.search(text):
        return value
    return approx_tokens(text)
