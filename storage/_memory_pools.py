"""A user's memory pool generation (``memory_pools``): every write to the user's memories moves it
by one in the write's own transaction, so a process tells in one key lookup whether what it read of
the user (its recall index, the read a write was decided on) is still current."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, select, update

from memabra.storage._memory_models import MemoryPoolRow
from memabra.storage._models import table_of

__all__ = ["GENERATION", "bump", "bump_from"]

GENERATION = select(MemoryPoolRow.generation).where(MemoryPoolRow.owner == bindparam("owner"))


def bump_from(conn: Connection, owner: str, expected: int) -> bool:
    """Bump the user's generation from ``expected``, or nothing when it moved since (False). The
    conditional update waits for a concurrent writer's row lock and then sees its generation, so two
    writes decided on one read cannot both commit."""
    pools = table_of(MemoryPoolRow)
    moved = conn.execute(
        update(pools).where(pools.c.owner == owner, pools.c.generation == expected).values(generation=expected + 1)
    )
    if moved.rowcount:
        return True
    if expected != 0:
        return False
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    upsert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    # the row it inserted, not the rowcount: psycopg reports -1 (true) for an INSERT ... ON
    # CONFLICT DO NOTHING built by SQLAlchemy, so the first writes of a new user both committed
    first = upsert(pools).values(owner=owner, generation=1).on_conflict_do_nothing().returning(pools.c.owner)
    return conn.execute(first).first() is not None


def bump(conn: Connection, owner: str) -> None:
    pools = table_of(MemoryPoolRow)
    done = conn.execute(update(pools).where(pools.c.owner == owner).values(generation=pools.c.generation + 1))
    if done.rowcount == 0:
        from sqlalchemy.dialects.postgresql import insert as pg_insert
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        upsert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(
            upsert(pools)
            .values(owner=owner, generation=1)
            .on_conflict_do_update(index_elements=["owner"], set_={"generation": pools.c.generation + 1})
        )
