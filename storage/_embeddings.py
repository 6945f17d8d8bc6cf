"""Stored embeddings: one row per encoder and text (by its SHA-256), computed once and shared by
every process and every user with the same text."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from memabra._records import utcnow
from memabra.storage._memory_models import EmbeddingRow
from memabra.storage._models import table_of
from memabra.storage._tx import Transactions

__all__ = ["EmbeddingTable", "text_key"]

# Keys per IN (...) list, under SQLite's limit on bound parameters.
_CHUNK = 900


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingTable:
    """Embeddings by encoder name and text, float32, computed once and shared by every process."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._tx = Transactions(engine)

    def load(self, model: str, texts: Sequence[str]) -> dict[str, NDArray[np.float32]]:
        keys = {text_key(t): t for t in dict.fromkeys(texts)}
        out: dict[str, NDArray[np.float32]] = {}
        t = EmbeddingRow
        with self._engine.connect() as conn:
            for chunk in _chunks(list(keys)):
                rows = conn.execute(
                    select(t.text_sha256, t.dim, t.vector).where(t.model == model, t.text_sha256.in_(chunk))
                )
                for sha, dim, blob in rows:
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if vector.shape[0] == dim:
                        out[keys[sha]] = vector
        return out

    def save(self, model: str, vectors: Mapping[str, NDArray[np.float32]]) -> None:
        if not vectors:
            return
        now = utcnow()
        rows = {
            text_key(text): {
                "model": model,
                "text_sha256": text_key(text),
                "dim": int(np.asarray(v).shape[0]),
                "vector": np.ascontiguousarray(v, dtype=np.float32).tobytes(),
                "created_at": now,
            }
            for text, v in vectors.items()
        }
        # another process may store the same text at the same moment: the first one's row stands
        insert = pg_insert if self._engine.dialect.name == "postgresql" else sqlite_insert
        statement = insert(table_of(EmbeddingRow)).on_conflict_do_nothing(index_elements=["model", "text_sha256"])
        values = list(rows.values())

        def work(conn: Connection) -> None:
            for start in range(0, len(values), _CHUNK):
                conn.execute(statement, values[start : start + _CHUNK])

        self._tx.write_connection(work, what="embedding cache write")


def _chunks(values: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i : i + _CHUNK]
