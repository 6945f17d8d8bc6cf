"""Two processes retiring one memory at the same moment (a user's "forget this" sent twice, a
support engineer retiring it while the retraction lands): one retirement is recorded, the other
is refused as already retired. On PostgreSQL both used to read the memory active and both wrote
a RETIRED entry to its history; the row is now read under a lock by changes that check it first."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
from sqlalchemy import create_engine, text

from memabra import InvalidRecordError, SQLMemory
from memabra._memory import MemoryAction
from memabra.storage import EpisodeLog

pytestmark = pytest.mark.skipif(
    not os.environ.get("MEMABRA_TEST_DATABASE_URL"), reason="PostgreSQL: row locks (SQLite has one writer)"
)


def test_two_retirements_at_once_record_one(pg_schema_url: str) -> None:
    from memabra.storage import upgrade

    upgrade(pg_schema_url)
    log = EpisodeLog(pg_schema_url)
    blocker = create_engine(pg_schema_url)
    try:
        memory = SQLMemory(log)
        item = memory.remember("ann", "I am vegetarian")
        outcomes: list[str] = []

        def retire(reason: str) -> None:
            try:
                SQLMemory(log).retire("ann", item.id, reason=reason)
                outcomes.append("retired")
            except InvalidRecordError as exc:
                outcomes.append(str(exc))

        with blocker.connect() as conn:
            # another transaction holds the row: both retirements start while it does, so both
            # read the memory before either writes (the race, made certain)
            conn.execute(text("select 1 from registry where id = :id for update"), {"id": item.id})
            threads = [threading.Thread(target=retire, args=(f"ticket {n}",)) for n in (1, 2)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            conn.rollback()
        for t in threads:
            t.join(timeout=30)
        assert sorted(outcomes, key=len) == ["retired", f"memory {item.id!r} is already retired; nothing changed"]
        retirements = [c for c in memory.history("ann", item.id) if c.action is MemoryAction.RETIRED]
        assert len(retirements) == 1
    finally:
        blocker.dispose()
        log.close()


def test_a_retirement_waits_behind_a_write_of_the_user_without_a_deadlock(
    pg_schema_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A write of the user's memories (a new fact superseding this one) locks the user's generation
    row first and then the memory's row. A retirement used to lock the memory's row first and then
    wait for the generation row: each held what the other waited for, PostgreSQL broke the cycle
    after deadlock_timeout by failing one of them, and the retirement was retried. It now takes the
    generation row first too, so it simply waits its turn and finds the memory superseded."""
    from memabra.storage import upgrade

    upgrade(pg_schema_url)
    log = EpisodeLog(pg_schema_url)
    writer = create_engine(pg_schema_url)
    try:
        item = SQLMemory(log).remember("ann", "I am vegetarian")
        outcomes: list[str] = []

        def retire() -> None:
            try:
                SQLMemory(log).retire("ann", item.id, reason="by hand")
                outcomes.append("retired")
            except InvalidRecordError as exc:
                outcomes.append(str(exc))

        caplog.set_level(logging.INFO, logger="memabra")
        with writer.connect() as conn:
            conn.execute(text("set lock_timeout = '20s'"))
            # the superseding write's order: the generation row, then the memory's row
            conn.execute(text("update memory_pools set generation = generation + 1 where owner = 'ann'"))
            thread = threading.Thread(target=retire)
            thread.start()
            time.sleep(0.5)  # the retirement is waiting for the generation row by now
            conn.execute(
                text("update registry set retired_at = now(), superseded_by = 'newer' where id = :id"), {"id": item.id}
            )
            conn.commit()
        thread.join(timeout=30)
        assert outcomes == [f"memory {item.id!r} is already retired; nothing changed"]
        assert not [r.getMessage() for r in caplog.records if "transient conflict" in r.getMessage()]
    finally:
        writer.dispose()
        log.close()
