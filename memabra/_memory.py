"""Where memories live and how they are written.

A backend has two abstract methods, ``items`` and ``put``; every convenience (deduplicated
``remember``, ``candidates``) is built on them. Two backends ship: :class:`SQLMemory`, memabra's
own registry table, and :class:`StoreMemory`, a LangGraph ``BaseStore`` you already run.

The write path turns what the user states about themselves into memories: rule-based extraction
by default (:func:`extract_facts`), a chat model when one is given (:class:`LLMFactExtractor`).
A new fact that restates a stored one (same content words) replaces it instead of piling up.
"""

from __future__ import annotations

import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.store.base import BaseStore

from memabra._records import Candidate, CandidateKind, RegistryItem, new_id, utcnow
from memabra._text import approx_tokens, content_words, overlap
from memabra.storage import EpisodeLog

__all__ = [
    "FactExtractor",
    "LLMFactExtractor",
    "MemoryBackend",
    "RuleFactExtractor",
    "SQLMemory",
    "StoreMemory",
    "extract_facts",
]

logger = logging.getLogger("memabra")

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_FACT = re.compile(
    r"\b(my|our)\s+[\w' -]{1,40}?\s+(is|are|was|were)\b"
    r"|\bi(?:'m| am)\s+(?!not sure|wondering|asking|looking|trying|going to ask|curious)\w"
    r"|\bi\s+(?:really\s+|usually\s+|always\s+|never\s+|don't\s+|do not\s+)?"
    r"(live|work|prefer|like|love|hate|dislike|own|have|moved|eat|drink|speak|use|need|want)\b"
    r"|\bcall me\b|\bremember (that )?|\bplease (always|never)\b",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(r"^\s*(what|who|where|when|why|how|which|can|could|would|should|is|are|do|does|did)\b", re.I)


class FactExtractor(Protocol):
    def __call__(self, text: str) -> list[str]: ...


def extract_facts(text: str) -> list[str]:
    """First-person statements of lasting facts in ``text`` ("I am vegetarian", "my dog is Rex").

    Questions are skipped; a sentence is kept whole so the memory reads as the user said it.
    """
    facts = []
    for raw in _SENTENCE.split(text):
        sentence = raw.strip().strip('"')
        if len(sentence) < 6 or sentence.endswith("?") or _QUESTION_START.match(sentence):
            continue
        if _FACT.search(sentence):
            facts.append(sentence.rstrip(".!; "))
    return facts


class RuleFactExtractor:
    """The default extractor: :func:`extract_facts`."""

    def __call__(self, text: str) -> list[str]:
        return extract_facts(text)


class LLMFactExtractor:
    """Asks a chat model for the durable facts a message states about the user; falls back to
    the rules when the reply is not a JSON list of strings."""

    PROMPT = (
        "Extract durable facts the user states about themselves (identity, preferences, constraints, "
        "circumstances) from the message. Reply with a JSON list of short first-person sentences, "
        "or [] if there are none."
    )

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    def __call__(self, text: str) -> list[str]:
        reply = self.model.invoke([SystemMessage(self.PROMPT), HumanMessage(text)])
        content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
        try:
            facts = json.loads(content)
        except json.JSONDecodeError:
            logger.info("fact extraction reply was not JSON; using the rules")
            return extract_facts(text)
        if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
            return extract_facts(text)
        return [f.strip() for f in facts if f.strip()]


class MemoryBackend(ABC):
    """Two abstract methods; everything else is built on them."""

    dedup_threshold: float = 0.85

    @abstractmethod
    def items(self, user_id: str) -> list[RegistryItem]:
        """Every live memory of ``user_id`` (never another user's)."""

    @abstractmethod
    def put(self, item: RegistryItem) -> None:
        """Insert or replace one memory."""

    def candidates(self, user_id: str) -> list[Candidate]:
        return [item.as_candidate() for item in self.items(user_id)]

    def remember(self, user_id: str, text: str, *, source: str = "user", at: datetime | None = None) -> RegistryItem:
        """Store ``text`` as a memory of ``user_id``; a near-duplicate of a stored memory
        (content-word overlap >= ``dedup_threshold`` both ways) is refreshed instead."""
        words = content_words(text)
        now = at or utcnow()
        for item in self.items(user_id):
            other = content_words(item.text)
            if words and other and overlap(words, other) >= self.dedup_threshold and len(words ^ other) <= 1:
                refreshed = RegistryItem(
                    kind=item.kind, id=item.id, owner=item.owner, text=text, tokens=approx_tokens(text),
                    name=item.name, source=source, metadata=item.metadata, created_at=item.created_at,
                    updated_at=now, last_chosen_at=item.last_chosen_at,
                    times_chosen=item.times_chosen, times_used=item.times_used,
                )
                self.put(refreshed)
                return refreshed
        item = RegistryItem(
            kind=CandidateKind.MEMORY, id=f"mem:{new_id()[:16]}", owner=user_id, text=text,
            tokens=approx_tokens(text), name=text[:60], source=source, created_at=now,
        )
        self.put(item)
        return item


class SQLMemory(MemoryBackend):
    """Memories in memabra's registry table, next to the episode log."""

    def __init__(self, log: EpisodeLog) -> None:
        self.log = log

    def items(self, user_id: str) -> list[RegistryItem]:
        return self.log.items(user_id, CandidateKind.MEMORY)

    def put(self, item: RegistryItem) -> None:
        self.log.put_items([item])


class StoreMemory(MemoryBackend):
    """Memories in a LangGraph ``BaseStore`` under the namespace ``(*prefix, user_id)``.

    Usage counters live in the episode log, not the store: pass ``log`` to have them filled in
    for featurisation.
    """

    def __init__(self, store: BaseStore, *, prefix: Sequence[str] = ("memabra", "memories"), log: EpisodeLog | None = None) -> None:
        self.store = store
        self.prefix = tuple(prefix)
        self.log = log

    def items(self, user_id: str) -> list[RegistryItem]:
        found = self.store.search((*self.prefix, user_id), limit=10_000)
        items = [_item_from_store(user_id, it.key, it.value, it.created_at, it.updated_at) for it in found]
        if self.log is not None and items:
            stats = self.log.candidate_stats(user_id, [i.id for i in items])
            items = [
                _with_counts(i, stats[i.id].times_chosen, stats[i.id].times_used) if i.id in stats else i for i in items
            ]
        return items

    def put(self, item: RegistryItem) -> None:
        value: dict[str, Any] = {"text": item.text, "tokens": item.tokens, "source": item.source, "name": item.name}
        self.store.put((*self.prefix, item.owner), item.id, value)


def _item_from_store(user_id: str, key: str, value: dict[str, Any], created: datetime, updated: datetime) -> RegistryItem:
    text = str(value.get("text", ""))
    return RegistryItem(
        kind=CandidateKind.MEMORY, id=key, owner=user_id, text=text,
        tokens=int(value.get("tokens") or approx_tokens(text)), name=str(value.get("name") or text[:60]),
        source=str(value.get("source", "store")), created_at=created, updated_at=updated,
    )


def _with_counts(item: RegistryItem, chosen: int, used: int) -> RegistryItem:
    return RegistryItem(
        kind=item.kind, id=item.id, owner=item.owner, text=item.text, tokens=item.tokens, name=item.name,
        body=item.body, source=item.source, metadata=item.metadata, created_at=item.created_at,
        updated_at=item.updated_at, times_chosen=chosen, times_used=used,
    )
