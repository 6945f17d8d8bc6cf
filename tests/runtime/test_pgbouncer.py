"""memabra behind PgBouncer in transaction pooling mode (two server connections shared by every
client, tests/pgbouncer.py): turns and learning past psycopg's prepare threshold, a learner lease
that stays one holder's, hot reload by polling, and ``memabra db upgrade``."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from memabra import Budget, Candidate, CandidateKind, RoutingContext, build_session
from memabra._errors import ConfigError
from memabra._records import utcnow
from memabra._serving import PolicyRuntime
from memabra.router import LinearRouter, Similarity, VWRouter
from memabra.storage import EpisodeLog, LearnerLease, LearnerStore, make_engine, resolve_url, upgrade
from memabra.storage._migrate import _migration_key

PG_ENV = "MEMABRA_TEST_DATABASE_URL"

pytestmark = pytest.mark.postgres

MEMABRA = Path(sys.executable).with_name("memabra")
QUERY = "suggest a restaurant for dinner"
TURNS = 12  # past psycopg's default prepare threshold (5) on every statement of a turn


def _server() -> str:
    return resolve_url(os.environ["MEMABRA_TEST_DATABASE_URL"])


def _backend(pid: int) -> tuple[str, object]:
    """``(state, backend_xmin)`` of a server process, read on the server directly."""
    admin = create_engine(_server())
    try:
        with admin.connect() as conn:
            row = conn.execute(
                text("SELECT state, backend_xmin FROM pg_stat_activity WHERE pid = :p"), {"p": pid}
            ).one()
            return str(row[0]), row[1]
    finally:
        admin.dispose()


def _holder_pid(engine: object, policy: str) -> int:
    holder = LearnerStore(engine).lease_holder(policy)  # type: ignore[arg-type]
    assert holder is not None
    return int(holder.holder.removeprefix("server process "))


def test_turns_routed_finished_given_feedback_and_learned_through_pgbouncer(pooled_url: str) -> None:
    upgrade(pooled_url)
    router = LinearRouter(seed=0, similarity=Similarity(encoder=None), epsilon=0.2)
    session = build_session(
        db=pooled_url, router=router, budget=Budget(max_tokens=200, slots={CandidateKind.MEMORY: 2})
    )
    try:
        diet = session.memory.remember("ann", "I am vegetarian")
        for i in range(4):
            session.memory.remember("ann", f"Restaurant note {i}: the place downtown had a long queue")
        for i in range(TURNS):
            turn = session.begin(user_id="ann", query=QUERY, thread_id=f"t{i}")
            eid = session.finish(turn.id, "Green Garden is vegetarian")
            helped = turn.selection is not None and diet.id in turn.selection.chosen_ids
            session.feedback(eid, correct=helped, final=True)
            session.learn_pending()
        learner = session.runtime.learner
        assert learner is not None
        # the reader waits behind the oldest transaction running anywhere on the (shared) server
        deadline = time.monotonic() + 30
        while learner.learned < TURNS:
            assert time.monotonic() < deadline, f"learned {learner.learned} of {TURNS}"
            session.learn_pending()
            time.sleep(0.05)
        session.save_snapshot()
        state = LearnerStore(session.log.engine).checkpoint(router.name)
        assert state is not None and state.learned == TURNS
    finally:
        session.close()


def test_two_learners_through_pgbouncer_never_both_hold_the_lease(pooled_url: str) -> None:
    upgrade(pooled_url)
    first, second = make_engine(pooled_url), make_engine(pooled_url)  # two processes' pools
    a, b = LearnerLease(first, "vw"), LearnerLease(second, "vw")
    try:
        assert a.acquire()
        for _ in range(10):
            # other work through the pooler in between: server connections change hands
            with second.connect() as conn:
                conn.execute(text("SELECT 1"))
            assert not b.acquire()
            assert a.renew()
        # the holder's server connection is pinned, idle in a transaction that holds no snapshot
        state, xmin = _backend(_holder_pid(second, "vw"))
        assert state == "idle in transaction" and xmin is None
        a.release()
        assert b.acquire() and not a.acquire()
        b.release()
    finally:
        a.release()
        b.release()
        first.dispose()
        second.dispose()


def test_a_dead_holders_lease_is_taken_over_through_pgbouncer(pooled_url: str) -> None:
    upgrade(pooled_url)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from memabra.storage import LearnerLease, make_engine\n"
            "lease = LearnerLease(make_engine(sys.argv[1]), 'vw')\n"
            "print(lease.acquire(), flush=True)\n"
            "time.sleep(300)\n",
            pooled_url,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    engine = make_engine(pooled_url)
    lease = LearnerLease(engine, "vw")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        assert not lease.acquire()
        holder.kill()  # SIGKILL: no release, the client connection just goes
        holder.wait()
        deadline = time.monotonic() + 10
        while not lease.acquire():
            assert time.monotonic() < deadline, "the dead holder's lease was never freed"
            time.sleep(0.1)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
        lease.release()
        engine.dispose()


# The server's idle-in-transaction timeout in this test: short to keep the test quick, long enough
# that the lease's own short reads on a loaded runner never reach it.
_IDLE_TIMEOUT_MS = 1000


@pytest.mark.parametrize("through", ["pgbouncer", "direct"])
def test_a_lease_whose_session_the_server_ended_is_seen_lost(
    through: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """What a DBA's idle_in_transaction_session_timeout does to the idle lease transaction: the
    server ends the session; the next renewal says the lease is lost, and another learner takes it."""
    if through == "pgbouncer":
        url = str(request.getfixturevalue("pooled_url"))
        upgrade(url)
    else:
        plain = str(request.getfixturevalue("pg_schema_url"))
        # migrated without the timeout: on a loaded runner a migration's pause between statements
        # reached it (the test then failed in its setup, not on the lease)
        upgrade(plain)
        # the real timeout, which a URL can set only on a direct connection (PgBouncer drops options)
        url = plain.replace("options=", f"options=-cidle_in_transaction_session_timeout%3D{_IDLE_TIMEOUT_MS}%20")
    first, second = make_engine(url), make_engine(url)
    a, b = LearnerLease(first, "vw"), LearnerLease(second, "vw")
    try:
        assert a.acquire() and not b.acquire()
        if through == "pgbouncer":  # the same end, by hand: the server session of the holder goes
            admin = create_engine(_server())
            with admin.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": _holder_pid(second, "vw")})
            admin.dispose()
        time.sleep(_IDLE_TIMEOUT_MS / 1000 * 2)
        with caplog.at_level(logging.WARNING, logger="memabra"):
            assert not a.renew() and not a.held
        assert "learner lease for vw lost" in caplog.text
        assert b.acquire()
    finally:
        a.release()
        b.release()
        first.dispose()
        second.dispose()


def test_a_snapshot_activated_elsewhere_reaches_a_runtime_through_pgbouncer_by_polling(
    pooled_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    upgrade(pooled_url)
    with EpisodeLog(pooled_url) as log:
        log.save_snapshot(VWRouter(seed=0).snapshot())
        first = LearnerStore(log.engine).active_version("vw")
        with caplog.at_level(logging.INFO, logger="memabra"):
            runtime = PolicyRuntime(log, VWRouter(seed=0), learn=False, reload_interval_s=0.1)
            try:
                newer = VWRouter(seed=1).snapshot()
                # another process promotes (its own connections, through the same pooler)
                subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        "import sys\n"
                        "from memabra.router import VWRouter\n"
                        "from memabra.storage import EpisodeLog\n"
                        "with EpisodeLog(sys.argv[1]) as log:\n"
                        "    snap = VWRouter(seed=1).snapshot()\n"
                        "    log.save_snapshot(snap)\n"
                        "    log.set_snapshot_status(snap.version, 'active')\n",
                        pooled_url,
                    ],
                    check=True,
                )
                assert newer.version != first
                context = RoutingContext(QUERY, "ann", kinds=(CandidateKind.MEMORY,))
                deadline = time.monotonic() + 15
                while runtime.router.policy_version != newer.version:
                    assert time.monotonic() < deadline, "the promote never reached the runtime"
                    runtime.router.choose(context, [Candidate("m1", CandidateKind.MEMORY, "I am vegetarian", 5)])
                    time.sleep(0.05)
                # the listener finds out that nothing is pushed through the pooler, and says so once
                while "gets no notifications" not in caplog.text:
                    assert time.monotonic() < deadline + 10, "the listener never said LISTEN does not work"
                    time.sleep(0.1)
            finally:
                runtime.close()
    assert caplog.text.count("gets no notifications") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_listener_says_nothing_when_notifications_arrive(
    pg_schema_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    upgrade(pg_schema_url)
    with EpisodeLog(pg_schema_url) as log, caplog.at_level(logging.INFO, logger="memabra"):
        runtime = PolicyRuntime(log, VWRouter(seed=0), learn=False, reload_interval_s=3600)
        try:
            newer = VWRouter(seed=1).snapshot()
            with EpisodeLog(pg_schema_url) as other:
                other.save_snapshot(newer)
                other.set_snapshot_status(newer.version, "active")
            deadline = time.monotonic() + 10
            while runtime.watcher.loaded_version != newer.version:  # pushed: no poll is due for an hour
                assert time.monotonic() < deadline, "the NOTIFY never reached the runtime"
                time.sleep(0.05)
            time.sleep(1.5)
        finally:
            runtime.close()
    assert "gets no notifications" not in caplog.text


def test_db_upgrade_through_pgbouncer_concurrently_and_again(pooled_url: str) -> None:
    # up to before the migration with an index built concurrently, so the upgrades build it
    upgrade(pooled_url, "0007")
    failures: list[BaseException] = []

    def run() -> None:
        try:
            upgrade(pooled_url)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures and not any(t.is_alive() for t in threads)
    # every migration lock was released: none is left on any server connection
    engine = make_engine(pooled_url)
    with engine.connect() as conn:
        key = _migration_key(conn) & 0xFFFFFFFFFFFFFFFF
    engine.dispose()
    admin = create_engine(_server())
    try:
        with admin.connect() as conn:
            left = conn.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND classid::bigint = :hi AND objid::bigint = :lo"
                ),
                {"hi": key >> 32, "lo": key & 0xFFFFFFFF},
            ).scalar_one()
    finally:
        admin.dispose()
    done = subprocess.run(
        [str(MEMABRA), "db", "upgrade", "--db", pooled_url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert left == 0


@pytest.mark.skipif(not os.environ.get(PG_ENV), reason="PostgreSQL only")
@pytest.mark.parametrize(
    ("query", "threshold"), [("", None), ("?prepare_threshold=5", 5), ("?prepare_threshold=none", None)]
)
def test_the_url_may_bring_back_prepared_statements(query: str, threshold: int | None) -> None:
    """Where no transaction pooler sits in between: `memabra learner --db URL?prepare_threshold=5`."""
    engine = make_engine(resolve_url(os.environ[PG_ENV]) + query)
    try:
        assert "prepare_threshold" not in engine.url.query  # never reaches a conninfo (LISTEN's DSN)
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection.prepare_threshold == threshold  # type: ignore[union-attr]
    finally:
        engine.dispose()


@pytest.mark.parametrize("bad", ["-1", "five", "1.5"])
def test_a_bad_prepare_threshold_in_the_url_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ConfigError, match=f"prepare_threshold in the database URL must be .* got '{re.escape(bad)}'"):
        make_engine(f"postgresql+psycopg://root@127.0.0.1/x?prepare_threshold={bad}")


def test_the_lease_holder_is_named_with_when_it_took_the_lease_through_pgbouncer(pooled_url: str) -> None:
    """Behind a pooler a server connection's own name and start are the pooler's (its last client's
    name, the moment the pooler opened it): the lease's transaction names itself and dates the lease."""
    upgrade(pooled_url)
    engine = make_engine(pooled_url)
    with engine.connect() as conn:  # a client that named the server connection before the learner got it
        conn.execute(text("SET application_name = 'psql'"))
        conn.commit()
    time.sleep(1.1)
    lease = LearnerLease(engine, "linear")
    try:
        taken = utcnow()
        assert lease.acquire()
        holder = LearnerStore(engine).lease_holder("linear")
        assert holder is not None and holder.client is not None and holder.since is not None
        assert holder.client.startswith("memabra learner linear") and "psql" not in holder.client
        assert abs((holder.since - taken).total_seconds()) < 1.0, (holder.since, taken)
        state, xmin = _backend(_holder_pid(engine, "linear"))
        assert state == "idle in transaction" and xmin is None  # the name's SET holds no snapshot either
    finally:
        lease.release()
        engine.dispose()
