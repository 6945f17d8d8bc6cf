"""A turn's copy written while the transaction that logs the turn's episode commits: the copy must
not outlive the episode (it would read as a lost turn an hour later, and a retry or an operator
would log the decision a second time). The interleaving is forced, not hoped for: the logging
transaction is held at its COMMIT until the copy's write is seen waiting on a lock (on PostgreSQL,
in ``pg_stat_activity``; SQLite's writer waits on the file's write lock, which no view shows, so
there a short wait stands in)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from sqlalchemy import event, text

from memabra._feedback import RewardService
from memabra._paused_turns import abandon_paused_turn
from memabra._records import utcnow
from memabra._turn_document import turn_document
from memabra._turns import Turn
from memabra.storage import EpisodeLog, SuspendedTurn, make_engine

_WAIT_S = 20.0


def _kept(turn_id: str) -> SuspendedTurn:
    t = Turn(turn_id, "ann", "mail", 0, "Email bob please", None, "", ())
    return SuspendedTurn(t.id, t.episode_id, t.user_id, t.thread_id, utcnow(), turn_document(t, 1.0), paused=False)


def _waiting_on_a_lock(url: str, pids: list[int], writer: threading.Thread) -> None:
    """Returns once the copy's writer waits on a lock (or has finished: then the test fails below)."""
    deadline = time.monotonic() + _WAIT_S
    if not url.startswith("postgresql"):
        writer.join(0.5)  # BEGIN IMMEDIATE waits on the write lock the held transaction keeps
        return
    probe = make_engine(url)  # its own pool: the log's may have no connection to spare
    try:
        while time.monotonic() < deadline and writer.is_alive():
            if pids:  # the writer's backend, once it has sent a statement
                with probe.connect() as conn:
                    state = conn.execute(
                        text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :p"), {"p": pids[0]}
                    ).scalar()
                if state == "Lock":
                    return
            time.sleep(0.02)
    finally:
        probe.dispose()


def test_a_copy_written_as_its_turn_is_logged_does_not_outlive_the_episode(log: EpisodeLog, migrated_url: str) -> None:
    kept = _kept("t-race")
    log.suspend_turn(kept)
    engine = log._engine  # noqa: SLF001 - hooks on the log's own connections force the interleaving
    at_commit, release = threading.Event(), threading.Event()
    writer_pid: list[int] = []
    logged: list[str] = []
    errors: list[BaseException] = []

    def hold_the_logging_commit(conn: Any) -> None:
        if threading.current_thread().name == "logging":
            at_commit.set()
            assert release.wait(_WAIT_S)

    def note_the_writer(conn: Any, cursor: Any, *_: Any) -> None:
        if threading.current_thread().name == "copy" and not writer_pid:
            writer_pid.append(getattr(getattr(cursor.connection, "info", None), "backend_pid", 0))

    def run(work: Any) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    event.listen(engine, "commit", hold_the_logging_commit)
    event.listen(engine, "before_cursor_execute", note_the_writer)
    try:
        logging_ = threading.Thread(
            target=run, args=(lambda: logged.append(abandon_paused_turn(RewardService(log), kept)),), name="logging"
        )
        logging_.start()
        assert at_commit.wait(_WAIT_S)  # the episode is written and the copy deleted, not yet committed
        # a pause (or a retry going on) writes the turn's copy again right now
        copy = threading.Thread(
            target=run, args=(lambda: log.suspend_turn(replace(kept, suspended_at=utcnow())),), name="copy"
        )
        copy.start()
        _waiting_on_a_lock(migrated_url, writer_pid, copy)
        release.set()
        logging_.join(_WAIT_S)
        copy.join(_WAIT_S)
    finally:
        release.set()
        event.remove(engine, "commit", hold_the_logging_commit)
        event.remove(engine, "before_cursor_execute", note_the_writer)
    assert not errors, errors
    assert logged == [kept.episode_id] and log.get_episode(kept.episode_id).metadata["pauses"] == 0
    assert log.suspended_turn(kept.turn_id) is None and not log.suspended_turns()
