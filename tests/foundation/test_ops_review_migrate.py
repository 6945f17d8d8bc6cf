"""``memabra db upgrade`` on PostgreSQL while another session holds a table the migration alters
(an idle transaction left open): it gives up after bounded waits, changing nothing, instead of
waiting for ever at the head of the lock queue, where every serving process's reads of that table
would queue behind it."""

from __future__ import annotations

import os
import threading

import pytest
from sqlalchemy import text

from memabra._errors import StorageContentionError
from memabra.storage import _migrate as migrate
from memabra.storage import current_revision, make_engine, upgrade


@pytest.mark.skipif(not os.environ.get("MEMABRA_TEST_DATABASE_URL"), reason="PostgreSQL only")
def test_an_upgrade_blocked_by_an_open_transaction_gives_up_and_changes_nothing(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade(pg_schema_url, "0010")
    monkeypatch.setattr(migrate, "PG_LOCK_TIMEOUT_MS", 200)
    monkeypatch.setattr(migrate, "PG_LOCK_ATTEMPTS", 3)
    holder = make_engine(pg_schema_url)
    engine = make_engine(pg_schema_url)
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            outcome.append(upgrade(engine))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    try:
        with holder.connect() as conn:
            conn.execute(text("SELECT count(*) FROM policy_snapshots"))  # ACCESS SHARE until the end
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            thread.join(30)
            blocked = thread.is_alive()
            conn.rollback()  # the old code waits for this; let it finish either way
        thread.join(30)
        assert not blocked, "db upgrade waited on the open transaction instead of giving up"
        assert len(outcome) == 1 and isinstance(outcome[0], StorageContentionError), outcome
        assert "lock" in str(outcome[0]) and "run it again" in str(outcome[0])
        assert current_revision(engine) == "0010"  # rolled back whole
        assert upgrade(engine) == migrate.head_revision()  # once the transaction ended
    finally:
        engine.dispose()
        holder.dispose()
