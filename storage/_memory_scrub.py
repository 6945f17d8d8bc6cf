"""The log side of forgetting memories: a forgotten memory's rows and history deleted, its text
blanked wherever the log offered it (ids stay), and the stored embeddings of every text it had
deleted; an erasure's removal of what a user owns in the log. Split from ``_memories``, whose
:class:`~memabra.storage.MemoryRegistry` calls these inside its own write transactions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from sqlalchemy import Engine, and_, delete, select, update
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra._records import CandidateKind
from memabra.storage._embeddings import text_key
from memabra.storage._injected_bodies import forget_own_bodies
from memabra.storage._memory_models import EmbeddingRow, MemoryHistoryRow
from memabra.storage._memory_pools import bump
from memabra.storage._models import DecisionCandidateRow, RegistryRow
from memabra.storage._rows import clean_text
from memabra.storage._tx import Transactions

__all__ = ["chunks", "erase_owned", "forget", "forget_in_log", "scrub_log"]

_MEMORY = CandidateKind.MEMORY.value
# IN-lists are chunked: SQLite's default limit on bound parameters is 32,766, PostgreSQL's 65,535.
_CHUNK = 900


def forget(s: Session, user_id: str, memory_ids: Sequence[str] | None) -> int:
    """Delete ``user_id``'s memories (every one when ``memory_ids`` is None) with their history,
    and scrub the log of their texts (:func:`scrub_log`); how many went. An unknown id refuses
    the whole call, nothing forgotten."""
    memory_ids = None if memory_ids is None else [clean_text(m) for m in memory_ids]
    stmt = select(RegistryRow.id).where(RegistryRow.kind == _MEMORY, RegistryRow.owner == user_id)
    if memory_ids is not None:
        wanted = list(dict.fromkeys(memory_ids))
        stmt = stmt.where(RegistryRow.id.in_(wanted), RegistryRow.deleted_at.is_(None))
    ids = list(s.scalars(stmt))
    if memory_ids is not None:
        unknown = sorted(set(wanted) - set(ids))
        if unknown:
            raise InvalidRecordError(f"user {user_id!r} has no memory {unknown[0]!r}; nothing was forgotten")
    texts: set[str] = set()
    for chunk in chunks(ids):
        texts.update(
            s.scalars(
                select(RegistryRow.text).where(
                    RegistryRow.kind == _MEMORY, RegistryRow.owner == user_id, RegistryRow.id.in_(chunk)
                )
            )
        )
        for old_text, new_text in s.execute(
            select(MemoryHistoryRow.old_text, MemoryHistoryRow.new_text).where(
                MemoryHistoryRow.owner == user_id, MemoryHistoryRow.memory_id.in_(chunk)
            )
        ):
            texts.update(t for t in (old_text, new_text) if t)
    for chunk in chunks(ids):
        s.execute(
            delete(RegistryRow).where(
                RegistryRow.kind == _MEMORY, RegistryRow.owner == user_id, RegistryRow.id.in_(chunk)
            )
        )
        s.execute(
            delete(MemoryHistoryRow).where(MemoryHistoryRow.owner == user_id, MemoryHistoryRow.memory_id.in_(chunk))
        )
    scrub_log(s, user_id, ids, texts)
    bump(s.connection(), user_id)
    return len(ids)


def scrub_log(s: Session, user_id: str, memory_ids: Sequence[str], texts: Iterable[str] = ()) -> None:
    """Blank the text of forgotten memories wherever the log offered them (ids stay), and delete
    the stored embeddings of every text they had (the log's and ``texts``). Embeddings are shared
    by content, so another user's identical text loses its row too and is embedded again on use."""
    user_id, memory_ids = clean_text(user_id), [clean_text(m) for m in memory_ids]
    t = DecisionCandidateRow
    forgotten = set(texts)
    for chunk in chunks(list(memory_ids)):
        forgotten.update(
            s.scalars(
                select(t.text)
                .where(and_(t.user_id == user_id, t.kind == _MEMORY, t.candidate_id.in_(chunk), t.text != ""))
                .distinct()
            )
        )
    keys = sorted({text_key(text) for text in forgotten})
    for chunk in chunks(keys):
        s.execute(delete(EmbeddingRow).where(EmbeddingRow.text_sha256.in_(chunk)))
    for chunk in chunks(list(memory_ids)):
        s.execute(
            update(t)
            .where(and_(t.user_id == user_id, t.kind == _MEMORY, t.candidate_id.in_(chunk)))
            .values(text="", metadata_={"forgotten": True})
        )


def erase_owned(s: Session, user_id: str) -> int:
    """An erasure's step in the log that must come before the user's episodes go: the stored
    embeddings of every memory text the log offered them and of their own skills and tools, then
    those skills and tools (``owner`` the user). Returns how many skills and tools went.

    The episodes are the only record of a memory deleted from its store behind memabra's back
    (LangMem's ``manage_memory`` delete): once they are gone, the memory backend's forgetting can no
    longer find that text, and its vector would outlive the erasure. The memories themselves go
    through the memory backend."""
    owner = clean_text(user_id)
    if not owner:  # '' owns the shared skills and tools: never erase those
        raise InvalidRecordError("user_id is empty: name the user to erase")
    t = DecisionCandidateRow
    texts = set(s.scalars(select(t.text).where(t.user_id == owner, t.kind == _MEMORY, t.text != "").distinct()))
    # and the earlier versions of their own skills and tools that their turns offered: no registry
    # row holds those texts any more
    offered_own = and_(t.user_id == owner, t.kind != _MEMORY, t.metadata_["owner"].as_string() == owner)
    texts.update(s.scalars(select(t.text).where(offered_own).distinct()))
    own_items = and_(RegistryRow.owner == owner, RegistryRow.kind != _MEMORY)
    texts.update(s.scalars(select(RegistryRow.text).where(own_items)))
    for chunk in chunks(sorted({text_key(text) for text in texts})):
        s.execute(delete(EmbeddingRow).where(EmbeddingRow.text_sha256.in_(chunk)))
    forget_own_bodies(s, owner)
    gone = int(getattr(s.execute(delete(RegistryRow).where(own_items)), "rowcount", 0) or 0)
    if gone:
        bump(s.connection(), owner)  # a cached recall index of the user must not offer them again
    return gone


def forget_in_log(engine: Engine, user_id: str, memory_ids: Sequence[str], texts: Iterable[str] = ()) -> None:
    """The log side of forgetting, for memories kept outside the registry (a LangGraph store):
    their text blanked in the log, and the stored embeddings of their ``texts`` deleted."""
    Transactions(engine).write(lambda s: scrub_log(s, user_id, memory_ids, texts), what="forget in the log")


def chunks(values: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i : i + _CHUNK]
