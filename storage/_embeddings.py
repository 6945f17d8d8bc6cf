"""Stored embeddings: one row per encoder and text (by its SHA-256), computed once and shared by
every process and every user with the same text.

After an encoder change the previous model's rows stay (a rollback reads them again);
:meth:`EmbeddingTable.models` shows what each encoder name holds and
:meth:`EmbeddingTable.delete_model` drops a retired one's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Engine, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from memabra._records import utcnow
from memabra.storage._memory_models import EmbeddingRow
from memabra.storage._models import table_of
from memabra.storage._tx import Transactions

__all__ = ["EmbeddingTable", "check_model_name", "text_key"]

# Keys per IN (...) list, under SQLite's limit on bound parameters.
_CHUNK = 900
# The width of the model column: PostgreSQL refuses a longer name mid-write, SQLite would keep it.
MODEL_NAME_MAX = 200


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
        check_model_name(model)
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

    def models(self) -> dict[str, int]:
        """How many vectors each encoder name holds, by name."""
        t = EmbeddingRow
        with self._engine.connect() as conn:
            rows = conn.execute(select(t.model, func.count()).group_by(t.model).order_by(t.model))
            return {name: int(count) for name, count in rows}

    def delete_model(self, model: str) -> int:
        """Delete every vector stored under the encoder name ``model`` (a model no longer served);
        returns how many. A process still serving it stores them again as it meets its texts."""
        check_model_name(model)

        def work(conn: Connection) -> int:
            return int(conn.execute(delete(EmbeddingRow).where(EmbeddingRow.model == model)).rowcount or 0)

        return self._tx.write_connection(work, what="embedding cache delete")


def check_model_name(model: str) -> None:
    """Refuse (``ValueError``) an encoder name that cannot key stored vectors."""
    if not isinstance(model, str) or not model or len(model) > MODEL_NAME_MAX:
        shown = model[:60] + "..." if isinstance(model, str) and len(model) > 60 else model
        raise ValueError(
            f"encoder name {shown!r} cannot key stored vectors: it must be a non-empty string of at most "
            f"{MODEL_NAME_MAX} characters"
        )


def _chunks(values: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i : i + _CHUNK]
