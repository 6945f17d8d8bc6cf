"""The learner: exactly once, in commit order, resumable, equal to a replay; the lease; hot reload."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from runtime.learning_log import log_final
from sqlalchemy import text

from memabra._learner import Learner, fresh_router, learn_item, replay
from memabra._serving import PolicyRuntime
from memabra.router import Router, VWRouter, learned_model, load_router
from memabra.storage import EpisodeLog, LearnerStore, upgrade


def vw() -> VWRouter:
    return VWRouter(seed=0)


def drain(learner: Learner, expected: int, *, timeout_s: float = 30.0) -> None:
    """Step until ``learner`` has learned ``expected`` rewards in all. On PostgreSQL the reader waits
    behind the oldest transaction running anywhere on the server (other test runs share it)."""
    deadline = time.monotonic() + timeout_s
    while learner.learned < expected:
        assert time.monotonic() < deadline, f"learned {learner.learned} of {expected}"
        if not learner.step().learned:
            time.sleep(0.05)
    assert learner.step().learned == 0 and learner.learned == expected


def checkpoint_model(log: EpisodeLog, policy: str = "vw") -> bytes:
    state = LearnerStore(log.engine).checkpoint(policy)
    assert state is not None and state.snapshot_version is not None
    return learned_model(log.get_snapshot(state.snapshot_version))


def test_learner_learns_each_final_reward_once_and_equals_a_replay(log: EpisodeLog) -> None:
    log_final(log, 30)
    log_final(log, 5, start=30, final=False)  # provisional: not learned
    learner = Learner(log, vw, commit_every=7)
    drain(learner, 30)
    learner.close()
    assert learner.learned == 30
    router, n = replay(log, "vw")
    assert n == 30
    assert checkpoint_model(log) == learned_model(router.snapshot())


def test_a_learner_killed_before_its_commit_resumes_from_the_last_one(log: EpisodeLog) -> None:
    log_final(log, 40)
    first = Learner(log, vw, commit_every=10)
    drain(first, 40)  # committed every 10
    first.commit_every = 1000
    log_final(log, 10, start=40)
    drain(first, 50)
    assert first.pending == 10
    first._lease.release()  # the process "dies": nothing after the last commit survives
    second = Learner(log, vw, commit_every=1000)
    assert second.acquire() and second.learned == 40
    drain(second, 50)
    second.close()
    router, _ = replay(log, "vw")
    assert checkpoint_model(log) == learned_model(router.snapshot())


def test_a_standby_waits_on_the_lease_and_takes_over(log: EpisodeLog) -> None:
    log_final(log, 12)
    holder = Learner(log, vw, commit_every=5)
    standby = Learner(log, vw, commit_every=5)
    assert holder.step().holds_lease
    assert not standby.step().holds_lease
    holder.close()
    log_final(log, 6, start=12)
    drain(standby, 18)
    standby.close()
    router, _ = replay(log, "vw")
    assert checkpoint_model(log) == learned_model(router.snapshot())


def test_a_learner_that_lost_its_lease_cannot_overwrite_its_successor(log: EpisodeLog) -> None:
    log_final(log, 10)
    zombie = Learner(log, vw, commit_every=1000, lease_ttl=timedelta(seconds=0.5))
    drain(zombie, 10)
    time.sleep(0.6) if log.engine.dialect.name == "sqlite" else zombie._lease.release()
    successor = Learner(log, vw, commit_every=1)
    zombie._lease._held = True  # it still believes it holds the lease
    drain(successor, 10)
    assert zombie.commit() is None and not zombie.holds_lease
    successor.close()


@pytest.mark.postgres
def test_a_reward_that_commits_late_is_not_skipped(log: EpisodeLog) -> None:
    """A transaction that finalised a reward earlier but commits later must still be learned: the
    reader stays behind the oldest running transaction."""
    if log.engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only: SQLite has one writer at a time")
    (early,) = log_final(log, 1, final=False)
    slow = log.engine.connect()
    tx = slow.begin()
    slow.execute(text("UPDATE rewards SET final = true WHERE episode_id = :e"), {"e": early})  # takes an xid first
    log_final(log, 3, start=1)  # later transactions, committed first
    learner = Learner(log, vw, commit_every=1000)
    assert learner.step().learned == 0  # everything waits behind the open transaction
    tx.commit()
    slow.close()
    drain(learner, 4)
    learner.close()
    router, n = replay(log, "vw")
    assert n == 4 and checkpoint_model(log) == learned_model(router.snapshot())


def test_an_agent_resumes_the_active_snapshot_and_reloads_a_promote(log: EpisodeLog) -> None:
    log_final(log, 20)
    first = PolicyRuntime(log, vw(), commit_every=5, listen=False)
    assert first.learner is not None
    deadline = time.monotonic() + 30
    while first.learner.learned < 20 and time.monotonic() < deadline:
        first.step()
    first.close()
    active = LearnerStore(log.engine).active_version("vw")
    assert active is not None and active.endswith("+20")
    second = PolicyRuntime(log, vw(), learn=False, reload_interval_s=0.05, listen=False)
    assert second.router.policy_version == active
    older = [s for s in log.list_snapshots("vw") if s.version != active][0]
    log.set_snapshot_status(older.version, "active")  # a rollback in the admin
    time.sleep(0.1)
    second.watcher.refresh(force=False)
    assert second.router.policy_version == older.version
    second.close()


def test_the_learner_proposes_instead_of_overriding_a_rollback(log: EpisodeLog) -> None:
    log_final(log, 10)
    learner = Learner(log, vw, commit_every=5)
    drain(learner, 10)
    assert len(log.list_snapshots("vw")) == 2
    first = log.list_snapshots("vw")[0]
    log.set_snapshot_status(first.version, "active")
    log_final(log, 5, start=10)
    drain(learner, 15)
    newest = log.list_snapshots("vw")[-1]
    assert newest.status == "candidate"
    assert LearnerStore(log.engine).active_version("vw") == first.version
    learner.close()


def test_fresh_router_refuses_an_unknown_policy() -> None:
    from memabra import ConfigError

    # a custom router's author who named its policy rather than its class is told how to name it
    with pytest.raises(ConfigError, match=r"unknown policy 'nope'.*--policy module:Class"):
        fresh_router("nope")


def test_closing_the_log_releases_the_lease_and_leaves_nothing_for_exit(migrated_url: str) -> None:
    from memabra._serving import _OPEN, _close_all

    log = EpisodeLog(migrated_url)
    log_final(log, 6)
    runtime = PolicyRuntime(log, vw(), commit_every=1000, listen=False)
    assert runtime.learner is not None and runtime.step() is not None and runtime.learner.learned == 6
    log.close()  # before the runtime: what was learned since the last commit is not saved
    assert log.closed and runtime not in _OPEN
    _close_all()  # the exit hook has nothing left to save (the schema may be gone by then)
    with EpisodeLog(migrated_url) as reopened:
        standby = Learner(reopened, vw, commit_every=1000)
        assert standby.acquire() and standby.learned == 0  # the lease was released, nothing committed
        drain(standby, 6)
        standby.close()


def trained_elsewhere(directory: Path, n: int = 25) -> Router:
    """A VW router taught ``n`` final rewards of another log (a model built offline, say)."""
    url = f"sqlite:///{directory / 'elsewhere.db'}"
    upgrade(url)
    router = vw()
    with EpisodeLog(url) as other:
        log_final(other, n, start=1000)
        for final in LearnerStore(other.engine).read_final():
            learn_item(router, final.item, local_credit=False)
    assert router.policy_version.endswith(f"+{n}")
    return router


def run_runtime(runtime: PolicyRuntime, expected: int) -> None:
    assert runtime.learner is not None
    deadline = time.monotonic() + 30
    while runtime.learner.learned < expected:
        assert time.monotonic() < deadline, f"learned {runtime.learner.learned} of {expected}"
        runtime.step()


def test_a_trained_router_given_to_a_new_log_is_what_its_learner_continues(log: EpisodeLog, tmp_path: Path) -> None:
    trained = trained_elsewhere(tmp_path)
    given = trained.policy_version
    log_final(log, 12)
    first = PolicyRuntime(log, load_router(trained.snapshot()), commit_every=5, listen=False)
    assert first.router.policy_version == given
    run_runtime(first, 12)
    assert first.router.policy_version.startswith(f"{given}+")  # serving the learner that started there
    base = log.get_snapshot(given)  # stored as the learner's start, never made active
    assert base.status == "retired" and learned_model(base) == learned_model(trained.snapshot())
    first.close()  # commits the last two
    expected = load_router(trained.snapshot())
    for final in LearnerStore(log.engine).read_final():
        learn_item(expected, final.item, local_credit=False)
    assert checkpoint_model(log) == learned_model(expected.snapshot())

    # a restart with the same router resumes the log's lineage, and replay starts from the base too
    log_final(log, 6, start=12)
    second = PolicyRuntime(log, load_router(trained.snapshot()), commit_every=5, listen=False)
    state = LearnerStore(log.engine).checkpoint("vw")
    assert state is not None and second.router.policy_version == state.snapshot_version
    run_runtime(second, 18)
    second.close()
    router, n = replay(log, "vw")
    assert n == 18 and checkpoint_model(log) == learned_model(router.snapshot())
    scratch, _ = replay(log, "vw", learner_args=dict(trained.get_params()))
    assert learned_model(scratch.snapshot()) != checkpoint_model(log)
    versions = [s.version for s in log.list_snapshots("vw")]
    assert versions.count(given) == 1  # stored once, not again at the restart

    # retention never takes the replay's starting point away
    log.prune_snapshots(1, policy="vw")
    assert log.get_snapshot(given).version == given
    router, _ = replay(log, "vw")
    assert checkpoint_model(log) == learned_model(router.snapshot())


def test_a_given_router_never_trained_starts_the_learner_from_scratch_as_before(log: EpisodeLog) -> None:
    log_final(log, 10)
    runtime = PolicyRuntime(log, vw(), commit_every=5, listen=False)
    run_runtime(runtime, 10)
    runtime.close()
    first, *_ = log.list_snapshots("vw")
    assert first.version.endswith("+5") and first.parent is None  # no base stored before it
    assert "base" not in first.metrics["learner"]  # type: ignore[operator]
    router, _ = replay(log, "vw")
    assert checkpoint_model(log) == learned_model(router.snapshot())


def test_a_trained_router_set_aside_for_the_log_s_own_lineage_is_reported(
    log: EpisodeLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_final(log, 5)
    learner = Learner(log, vw, commit_every=1000)
    drain(learner, 5)
    learner.close()
    with caplog.at_level("WARNING", logger="memabra"):
        PolicyRuntime(log, trained_elsewhere(tmp_path), learn=True, listen=False).close()
    assert "is not used" in caplog.text


def test_the_router_serving_gets_from_the_learner_is_its_live_snapshot_restored(log: EpisodeLog) -> None:
    """Serving takes ``live_router()`` after every learned reward: the state and the name of
    ``load_router(live_snapshot())``, without the bytes (and no longer tied to the learner)."""
    from memabra.router import LinearRouter

    log_final(log, 12)
    learner = Learner(log, lambda: LinearRouter(seed=0), policy="linear", commit_every=5)
    drain(learner, 12)
    served, restored = learner.live_router(), load_router(learner.live_snapshot())
    assert (served.policy_version, served.snapshot().parent) == (restored.policy_version, restored.snapshot().parent)
    assert served.snapshot().model == restored.snapshot().model
    learner.close()


def test_a_step_asked_for_during_another_threads_step_does_not_wait_and_is_not_lost(log: EpisodeLog) -> None:
    """Turns finishing at once each ask for a learner step: the second asker returns at once and
    the thread stepping steps again, so the reward the asker made final is learned by then."""
    import threading

    log_final(log, 3)
    runtime = PolicyRuntime(log, vw(), commit_every=1000, listen=False)
    assert runtime.learner is not None
    inside, go = threading.Event(), threading.Event()
    calls: list[int] = []
    step = runtime.learner.step

    def slow_step():  # type: ignore[no-untyped-def]
        status = step()
        calls.append(status.learned)
        if len(calls) == 1:
            inside.set()
            assert go.wait(30)
        return status

    runtime.learner.step = slow_step  # type: ignore[method-assign]
    results: list[object] = []
    stepping = threading.Thread(target=lambda: results.append(runtime.step()))
    stepping.start()
    assert inside.wait(30)
    log_final(log, 2, start=3)  # made final while the first step runs
    started = time.monotonic()
    assert runtime.step() is None  # asked, and did not wait for the running step
    assert time.monotonic() - started < 1.0
    go.set()
    stepping.join(30)
    assert calls[0] == 3 and sum(calls) == 5  # the stepping thread stepped again and learned them
    assert runtime.learner.learned == 5 and results and results[0] is not None
    runtime.close()


def test_a_step_asked_for_during_a_commit_is_stepped_by_the_committing_thread(log: EpisodeLog) -> None:
    """``commit()`` holds the learner's lock too: a turn finishing meanwhile is answered the same
    way, so its reward is learned when the commit returns, not at some later turn."""
    import threading

    log_final(log, 3)
    runtime = PolicyRuntime(log, vw(), commit_every=1000, listen=False)
    assert runtime.learner is not None and runtime.step() is not None and runtime.learner.learned == 3
    inside, go = threading.Event(), threading.Event()
    commit = runtime.learner.commit

    def slow_commit(*, force: bool = False):  # type: ignore[no-untyped-def]
        inside.set()
        assert go.wait(30)
        return commit(force=force)

    runtime.learner.commit = slow_commit  # type: ignore[method-assign]
    committing = threading.Thread(target=runtime.commit)
    committing.start()
    assert inside.wait(30)
    log_final(log, 2, start=3)  # made final while the commit runs
    started = time.monotonic()
    assert runtime.step() is None  # asked, and did not wait for the commit
    assert time.monotonic() - started < 1.0
    go.set()
    committing.join(30)
    assert not committing.is_alive() and runtime.learner.learned == 5
    runtime.close()


def test_committed_here_counts_what_was_committed_not_what_was_dropped(log: EpisodeLog) -> None:
    """`memabra learner` says how many rewards it learned in its run: it summed its steps, so
    rewards it dropped (an outage, a refused commit, a restore) and learned again counted twice."""
    log_final(log, 30)
    learner = Learner(log, vw, commit_every=1000)
    try:
        drain(learner, 30)
        assert learner.committed_here == 0 and learner.pending == 30
        learner.abandon()  # dropped: the next lease holder learns them again
        assert sum(learner.step().learned for _ in range(3)) == 30  # this one, taking the lease back
    finally:
        learner.close()
    assert learner.committed_here == 30 and learner.learned == 30
    again = Learner(log, vw, commit_every=1000)
    try:
        assert again.acquire() and again.committed_here == 0  # a takeover commits nothing of its own yet
    finally:
        again.close()
