"""Real LangGraph checkpointers for tests whose runs cross processes: a SQLite file beside the
episode log, or the log's PostgreSQL database. ``checkpoints_for`` names one as ``KIND:WHERE``,
which a worker process is given on its command line."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any


def checkpoints_for(log_url: str, tmp_path: Path) -> str:
    if log_url.startswith("sqlite"):
        return f"sqlite:{tmp_path / 'checkpoints.db'}"
    return "postgres:" + log_url.replace("postgresql+psycopg://", "postgresql://", 1)


def sync_saver(kind: str, where: str) -> tuple[Any, Callable[[], None]]:
    """A set-up synchronous saver and the function that closes its connection."""
    if kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(where, check_same_thread=False)
        saver: Any = SqliteSaver(conn)
    else:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        # never preparing, as memabra's engines: through a transaction pooler
        # (TEST_THROUGH_PGBOUNCER) a prepared statement is not there on the next server connection
        conn = Connection.connect(  # type: ignore[assignment]
            where, autocommit=True, prepare_threshold=None, row_factory=dict_row
        )
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    return saver, conn.close


def async_saver(kind: str, where: str) -> Any:
    """An async saver's context manager."""
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        return AsyncSqliteSaver.from_conn_string(where)
    return _async_postgres_saver(where)


@asynccontextmanager
async def _async_postgres_saver(where: str) -> AsyncIterator[Any]:
    """``AsyncPostgresSaver.from_conn_string``'s saver, on a connection that never prepares."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    async with await AsyncConnection.connect(
        where, autocommit=True, prepare_threshold=None, row_factory=dict_row
    ) as conn:
        yield AsyncPostgresSaver(conn)  # type: ignore[arg-type]
