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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from langgraph.store.base import BaseStore

from memabra._errors import ConfigError, InvalidRecordError
from memabra._memory import MemoryBackend, Supersession
from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus
from memabra._recall import RECALL_ALL, RECALL_LIMIT, RecallIndex
from memabra._records import CandidateKind, RegistryItem, new_id, utcnow
from memabra._text import approx_tokens
from memabra.router import CachingEncoder
from memabra.storage import EpisodeLog, forget_in_log, last_chosen

__all__ = ["StoreMemory", "memory_text"]

USER_FIELD = "{user_id}"
_HISTORY_ROOT = "memabra_history"
# LangGraph stores page their search; memabra reads a user's memories in pages of this size.
_PAGE = 1000


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
        if not isinstance(user_id, str) or not user_id:
            raise InvalidRecordError("memories are scoped by user: give a non-empty user_id")
        return tuple(part.replace(USER_FIELD, user_id) for part in self.namespace)

    def _history_ns(self, user_id: str) -> tuple[str, ...]:
        return (_HISTORY_ROOT, *self.namespace_for(user_id))

    @property
    def has_index(self) -> bool:
        return bool(getattr(self.store, "index_config", None))

    # ------------------------------------------------------------------ reading

    def _all(self, ns: tuple[str, ...]) -> list[Any]:
        found: list[Any] = []
        while True:
            page = self.store.search(ns, limit=_PAGE, offset=len(found))
            found.extend(page)
            if len(page) < _PAGE:
                return found

    def _raw(self, user_id: str) -> list[tuple[RegistryItem, Mapping[str, Any]]]:
        ns = self.namespace_for(user_id)
        # search() matches namespace prefixes: keep the user's own namespace only.
        return [(self._to_item(user_id, it), it.value) for it in self._all(ns) if tuple(it.namespace) == ns]

    def _to_item(self, user_id: str, it: Any) -> RegistryItem:
        value = it.value if isinstance(it.value, Mapping) else {}
        text = memory_text(value, where=f"{'/'.join(it.namespace)}/{it.key}")
        metadata = {"status": "retired"} if value.get("status") == MemoryStatus.RETIRED.value else {}
        return RegistryItem(
            kind=CandidateKind.MEMORY,
            id=str(it.key),
            owner=user_id,
            text=text,
            tokens=_tokens(value.get("tokens"), text),
            name=str(value.get("name") or text[:60]),
            source=str(value.get("source", "store")),
            metadata=metadata,
            created_at=it.created_at,
            updated_at=it.updated_at,
        )

    def _with_counts(self, user_id: str, items: list[RegistryItem]) -> list[RegistryItem]:
        if self.log is None or not items:
            return items
        stats = self.log.candidate_stats(user_id, [i.id for i in items])
        out = []
        for i in items:
            s = stats.get(i.id)
            out.append(i if s is None else _counted(i, s.times_chosen, s.times_used))
        return out

    def items(self, user_id: str) -> list[RegistryItem]:
        active = [i for i, _ in self._raw(user_id) if not i.metadata.get("status")]
        return self._with_counts(user_id, active)

    def records(self, user_id: str, *, include_retired: bool = True) -> list[MemoryRecord]:
        raw = self._raw(user_id)
        used = last_chosen(self.log.engine, user_id, [i.id for i, _ in raw]) if self.log is not None and raw else {}
        out = []
        for item, value in raw:
            retired = bool(item.metadata.get("status"))
            if retired and not include_retired:
                continue
            out.append(
                MemoryRecord(
                    id=item.id,
                    user_id=user_id,
                    text=item.text,
                    status=MemoryStatus.RETIRED if retired else MemoryStatus.ACTIVE,
                    created_at=item.created_at,
                    updated_at=item.updated_at or item.created_at,
                    last_used_at=used.get(item.id),
                    superseded_by=value.get("superseded_by") if isinstance(value.get("superseded_by"), str) else None,
                    source=item.source,
                )
            )
        return sorted(out, key=lambda r: (r.created_at, r.id))

    def history(self, user_id: str, memory_id: str) -> list[MemoryChange]:
        self.get(user_id, memory_id)
        found = self.store.search(self._history_ns(user_id), filter={"memory_id": memory_id}, limit=10_000)
        changes = [_change_from(user_id, it.value) for it in found]
        return sorted(changes, key=lambda c: c.at)

    def recall(self, user_id: str, query: str, *, limit: int = RECALL_LIMIT) -> list[RegistryItem]:
        if self.has_index and query.strip():
            ns = self.namespace_for(user_id)
            hits = self.store.search(ns, query=query, limit=limit * 2)
            items = [self._to_item(user_id, it) for it in hits if tuple(it.namespace) == ns]
            return self._with_counts(user_id, [i for i in items if not i.metadata.get("status")][:limit])
        items = self.items(user_id)
        if len(items) <= max(RECALL_ALL, limit):
            return items
        version = (len(items), max(str(i.updated_at) for i in items))
        self._index.encoder = self.encoder
        return self._index.top(user_id, version, lambda: items, query, limit)

    # ------------------------------------------------------------------ writing

    def _value(self, item: RegistryItem, *, status: str = "active", superseded_by: str | None = None) -> dict[str, Any]:
        value: dict[str, Any] = {
            "text": item.text,
            "kind": "Memory",
            "content": {"content": item.text},
            "tokens": item.tokens,
            "source": item.source,
            "name": item.name,
            "status": status,
        }
        if superseded_by is not None:
            value["superseded_by"] = superseded_by
        return value

    def _log_change(self, change: MemoryChange) -> None:
        self.store.put(
            self._history_ns(change.user_id), f"{change.memory_id}-{new_id()[:12]}", _change_value(change), index=False
        )

    def _store(self, item: RegistryItem, change: MemoryChange, retire: Sequence[MemoryChange] = ()) -> None:
        ns = self.namespace_for(item.owner)
        # Reads first, so a bad retire id fails before anything is written.
        old = {c.memory_id: self.store.get(ns, c.memory_id) for c in retire}
        missing = [mid for mid, it in old.items() if it is None]
        if missing:
            raise InvalidRecordError(f"user {item.owner!r} has no memory {missing[0]!r}")
        self.store.put(ns, item.id, self._value(item))
        self._log_change(change)
        for c in retire:
            prior = old[c.memory_id]
            assert prior is not None
            self.store.put(ns, c.memory_id, {**prior.value, "status": "retired", "superseded_by": item.id})
            self._log_change(c)

    def _refresh(self, change: MemoryChange) -> None:
        ns = self.namespace_for(change.user_id)
        current = self.store.get(ns, change.memory_id)
        if current is None:
            raise InvalidRecordError(f"user {change.user_id!r} has no memory {change.memory_id!r}")
        if current.value.get("status") == "retired":  # since the caller read it: leave its text as it was
            raise InvalidRecordError(f"memory {change.memory_id!r} is retired")
        value = dict(current.value)
        if change.new_text:
            value.update(
                text=change.new_text,
                content={"content": change.new_text},
                tokens=approx_tokens(change.new_text),
                name=change.new_text[:60],
            )
        self.store.put(ns, change.memory_id, value)
        self._log_change(change)

    def _forget(self, user_id: str, memory_ids: Sequence[str] | None) -> int:
        ns = self.namespace_for(user_id)
        items = {str(it.key): it for it in self._all(ns) if tuple(it.namespace) == ns}
        ids = sorted(items) if memory_ids is None else list(dict.fromkeys(memory_ids))
        unknown = [m for m in ids if m not in items]
        if unknown:
            raise InvalidRecordError(f"user {user_id!r} has no memory {unknown[0]!r}; nothing was forgotten")
        history = self._all(self._history_ns(user_id))
        wanted = set(ids)
        # every text the memories had, so their stored embeddings go too
        texts = {t for mid in ids if (t := _readable_text(items[mid].value))}
        for it in history:
            if isinstance(it.value, Mapping) and it.value.get("memory_id") in wanted:
                texts.update(str(t) for t in (it.value.get("old_text"), it.value.get("new_text")) if t)
                self.store.delete(self._history_ns(user_id), it.key)
        for mid in ids:
            self.store.delete(ns, mid)
        if self.log is not None and ids:
            forget_in_log(self.log.engine, user_id, ids, texts)
        return len(ids)


def _readable_text(value: object) -> str | None:
    """An item's text, or None for a shape memabra cannot read (forgetting it must still work)."""
    if not isinstance(value, Mapping):
        return None
    try:
        return memory_text(value)
    except InvalidRecordError:
        return None


def _tokens(value: object, text: str) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else approx_tokens(text)


def _counted(item: RegistryItem, chosen: int, used: int) -> RegistryItem:
    return RegistryItem(
        kind=item.kind,
        id=item.id,
        owner=item.owner,
        text=item.text,
        tokens=item.tokens,
        name=item.name,
        body=item.body,
        source=item.source,
        metadata=item.metadata,
        created_at=item.created_at,
        updated_at=item.updated_at,
        times_chosen=chosen,
        times_used=used,
    )


def _change_value(c: MemoryChange) -> dict[str, Any]:
    return {
        "memory_id": c.memory_id,
        "action": c.action.value,
        "at": c.at.isoformat(),
        "old_text": c.old_text,
        "new_text": c.new_text,
        "episode_id": c.episode_id,
        "reason": c.reason,
    }


def _change_from(user_id: str, v: Mapping[str, Any]) -> MemoryChange:
    return MemoryChange(
        memory_id=str(v["memory_id"]),
        user_id=user_id,
        action=MemoryAction(v["action"]),
        at=datetime.fromisoformat(str(v["at"])),
        old_text=v.get("old_text"),
        new_text=v.get("new_text"),
        episode_id=v.get("episode_id"),
        reason=str(v.get("reason", "")),
    )
