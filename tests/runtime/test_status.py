"""``memabra status`` and ``EpisodeLog.status``: every way a reward can wait, named, on every backend."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from runtime.learning_log import log_final
from sqlalchemy import text, update
from typer.testing import CliRunner

from factories import episode
from memabra._cli import app
from memabra._cli._status import UNHEALTHY_EXIT
from memabra._learner import Learner
from memabra._records import utcnow
from memabra.router import VWRouter
from memabra.storage import EpisodeLog
from memabra.storage._models import EpisodeRow

runner = CliRunner(env={"COLUMNS": "200"})


def vw() -> VWRouter:
    return VWRouter(seed=0)


def _age_final_rewards(log: EpisodeLog, by: timedelta) -> None:
    """Make every final reward look ``by`` older (as if it had waited that long)."""
    with log.engine.begin() as conn:
        conn.execute(update(EpisodeRow).where(EpisodeRow.finalized_at.is_not(None)).values(finalized_at=utcnow() - by))


def _learn_everything(log: EpisodeLog, learner: Learner, expected: int) -> None:
    for _ in range(200):  # on PostgreSQL the reader waits behind other transactions on the server
        learner.step()
        if learner.learned >= expected:
            break
    learner.commit(force=True)


def _status(url: str, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    out = runner.invoke(app, ["status", "--db", url, "--json", "-", *args])
    document = out.stdout[out.stdout.index("{") :]
    return out.exit_code, out.output, json.loads(document)


def test_a_new_log_is_healthy(migrated_url: str) -> None:
    code, output, document = _status(migrated_url)
    assert code == 0, output
    assert document["healthy"] is True and document["problems"] == []
    assert document["status"]["episodes"] == 0 and document["status"]["policies"] == []
    assert "no policy has a snapshot or a learner checkpoint yet" in output


def test_final_rewards_no_learner_reads_fail_the_check(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 4)
        status = log.status()
        assert status.unlearned == 4 and status.policies == ()
        _age_final_rewards(log, timedelta(hours=2))
    assert _status(migrated_url)[0] == UNHEALTHY_EXIT
    code, output, document = _status(migrated_url, "--max-lag", "3h")
    assert code == 0, output
    code, output, document = _status(migrated_url)
    assert document["healthy"] is False
    (problem,) = document["problems"]
    assert problem["check"] == "learner"
    assert "4 final reward(s) not learned, the oldest final for 2h" in problem["message"]
    assert "no policy has a learner yet" in problem["message"]


def test_a_learner_that_kept_up_is_healthy_and_its_backlog_is_counted_from_its_position(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 10)
        learner = Learner(log, vw, commit_every=1000)
        _learn_everything(log, learner, 10)
        held = log.status()
        (policy,) = held.policies
        assert policy.policy == "vw" and policy.backlog == 0 and held.unlearned == 0
        assert policy.checkpoint is not None and policy.checkpoint.learned == 10
        assert policy.active_version == policy.checkpoint.snapshot_version
        assert policy.lease is not None  # the learner still holds it
        learner.close()
        log_final(log, 3, start=10)
        after = log.status().policies[0]
        assert after.lease is None and after.backlog == 3 and after.backlog_since is not None
        assert _status(migrated_url)[0] == 0  # waiting for seconds is no problem
        _age_final_rewards(log, timedelta(minutes=40))
    code, output, document = _status(migrated_url)
    assert code == UNHEALTHY_EXIT
    (problem,) = document["problems"]
    assert problem["check"] == "learner vw"
    assert "policy vw: 3 final reward(s) not learned, the oldest final for 40m" in problem["message"]
    assert "no learner holds the lease (start `memabra learner --policy vw`" in problem["message"]
    assert "✗ learner vw" in output
    assert _status(migrated_url, "--policy", "vw")[0] == UNHEALTHY_EXIT
    other = runner.invoke(app, ["status", "--db", migrated_url, "--policy", "linear"])
    assert other.exit_code == 1
    assert "--policy 'linear': the log has no snapshot or learner checkpoint of it (it has: vw)" in other.output


def test_feedback_windows_nobody_closes_fail_the_check(migrated_url: str) -> None:
    with EpisodeLog(migrated_url, feedback_window=timedelta(hours=1)) as log:
        log.log_episode(episode("ann", created_at=utcnow() - timedelta(hours=3)))
        log.log_episode(episode("ann"))
        status = log.status()
    assert status.open_windows == 2 and status.overdue == 1
    assert status.overdue_since is not None and utcnow() - status.overdue_since > timedelta(hours=1)
    code, output, document = _status(migrated_url)
    assert code == UNHEALTHY_EXIT
    (problem,) = document["problems"]
    assert problem["check"] == "feedback windows"
    assert problem["message"].startswith("1 feedback window(s) closed up to 2h")


def test_rewards_held_back_by_an_open_transaction_name_it(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        if log.engine.dialect.name != "postgresql":
            pytest.skip("PostgreSQL only: the learner's horizon is the oldest running transaction")
        log_final(log, 2)
        learner = Learner(log, vw, commit_every=1000)
        _learn_everything(log, learner, 2)
        learner.close()
        (early,) = log_final(log, 1, start=2, final=False)
        slow = log.engine.connect()
        tx = slow.begin()
        slow.execute(text("SET application_name = 'stuck-batch-job'"))
        slow.execute(text("UPDATE rewards SET final = true WHERE episode_id = :e"), {"e": early})  # takes an xid
        pid = slow.execute(text("SELECT pg_backend_pid()")).scalar_one()
        try:
            log_final(log, 2, start=3)  # final, committed after the open transaction began
            _age_final_rewards(log, timedelta(hours=1))
            policy = log.status().policies[0]
            assert policy.backlog == 2 and policy.held_back == 2
            code, output, document = _status(migrated_url)
        finally:
            tx.rollback()
            slow.close()
    assert code == UNHEALTHY_EXIT
    oldest = document["status"]["oldest_transaction"]
    assert oldest is not None
    (problem,) = document["problems"]
    if oldest["pid"] == pid:  # another test run on the same server may hold an older one
        assert f"2 of them wait behind PostgreSQL transaction {pid}" in problem["message"]
        assert "stuck-batch-job" in problem["message"]


def test_a_bad_max_lag_names_the_option(migrated_url: str, tmp_path: Path) -> None:
    out = runner.invoke(app, ["status", "--db", migrated_url, "--max-lag", "soon"])
    assert out.exit_code == 2 and "--max-lag" in out.output


def test_rewards_held_back_by_a_transaction_this_role_cannot_see_say_so() -> None:
    from datetime import UTC, datetime

    from memabra import health_problems
    from memabra.storage import LogStatus, PolicyStatus

    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    policy = PolicyStatus(
        "linear", None, None, None, None, backlog=3, backlog_since=now - timedelta(hours=1), held_back=3
    )
    state = LogStatus(now, "postgresql", "0008", 3, now, 0, 0, None, 3, now, (policy,), oldest_transaction=None)
    (problem,) = health_problems(state, timedelta(minutes=15))
    assert problem.check == "learner linear"
    assert "3 of them wait behind a transaction still open on the PostgreSQL server" in problem.message
    assert "pg_read_all_stats" in problem.message


def test_windows_left_open_while_a_learner_runs_point_at_its_error_log() -> None:
    from datetime import UTC, datetime

    from memabra import health_problems
    from memabra.storage import LeaseHolder, LogStatus, PolicyStatus

    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    lease = LeaseHolder("linear", "learner 7f3a", until=now + timedelta(seconds=10))
    policy = PolicyStatus("linear", None, None, None, lease, backlog=0, backlog_since=None, held_back=0)
    state = LogStatus(now, "sqlite", "0008", 3, now, 2, 2, now - timedelta(hours=2), 0, None, (policy,), None)
    (problem,) = health_problems(state)
    assert problem.check == "feedback windows"
    assert problem.message.startswith("2 feedback window(s) closed up to 2h ago and are still open")
    assert "a learner holds the lease (learner 7f3a" in problem.message and "could not be finalised" in problem.message


def test_only_the_policies_named_are_checked() -> None:
    """A log that once served vw keeps vw's checkpoint; its learner is behind for good."""
    from datetime import UTC, datetime

    from memabra import health_problems
    from memabra.storage import LogStatus, PolicyStatus

    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    old = PolicyStatus("vw", None, None, None, None, backlog=900, backlog_since=now - timedelta(days=30), held_back=0)
    serving = PolicyStatus("linear", None, None, None, None, backlog=0, backlog_since=None, held_back=0)
    state = LogStatus(now, "sqlite", "0008", 900, now, 0, 0, None, 0, None, (serving, old), None)
    (problem,) = health_problems(state)
    assert problem.check == "learner vw" and "`memabra status --policy P`" in problem.message
    assert health_problems(state, policies=["linear"]) == ()


def test_a_deletion_that_died_part_way_fails_the_check_until_it_is_run_again(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    from memabra.storage import _retention
    from memabra.storage._deletion_log import DeletionRow

    monkeypatch.setattr(_retention, "DELETE_CHUNK", 2)
    with EpisodeLog(migrated_url) as log:
        log.log_episodes([episode("ann") for _ in range(5)])

        def die(deleted: int) -> None:
            raise KeyboardInterrupt  # the process stops after its first chunk

        with pytest.raises(KeyboardInterrupt):
            log.delete_episodes(user_id="ann", include_unlearned=True, actor="cli:ops", progress=die)
        (entry,) = log.status().unfinished_deletions
        assert entry.deleted == 2 and entry.finished_at is None
        assert _status(migrated_url)[0] == 0  # a run making progress is no problem
        with log.engine.begin() as conn:
            conn.execute(update(DeletionRow).values(progressed_at=utcnow() - timedelta(hours=1)))
    code, output, document = _status(migrated_url)
    assert code == UNHEALTHY_EXIT and "deletions 1 running or stopped part way" in output
    (problem,) = document["problems"]
    assert problem["check"] == "deletions"
    assert "the deletion of user ann (unlearned rewards too) asked by cli:ops" in problem["message"]
    assert "stopped after 2 episode(s)" in problem["message"]
    command = problem["message"].split("`")[1]
    assert command == "memabra episodes delete --user ann --include-unlearned"
    again = runner.invoke(app, [*shlex.split(command)[1:], "--db", migrated_url])
    assert again.exit_code == 0 and "deleted 3 episode(s)" in again.output
    assert _status(migrated_url)[0] == 0


def test_every_unfinished_deletion_is_weighed_against_every_later_finished_one(migrated_url: str) -> None:
    """Years of a nightly retention job that dies now and then (each death covered by that night's
    rerun), then a stream of erasures: a dead erasure covered by its rerun long before the newest
    runs is not reported, and a run nothing covered is, behind more than a thousand covered ones."""
    from datetime import UTC, datetime

    from sqlalchemy import insert

    from memabra.storage._deletion_log import DeletionRow

    t = datetime(2024, 1, 1, 3, tzinfo=UTC)

    def row(day: int, minute: int, *, finished: bool, user: str | None = None) -> dict[str, object]:
        at = t + timedelta(days=day, minutes=minute)
        return {
            "id": f"{day:05d}{minute:04d}{user or ''}",
            "started_at": at,
            "progressed_at": at,
            "finished_at": at if finished else None,
            "actor": "cron" if user is None else "cli:ops",
            "client": None,
            "named": 0,
            "episode_ids": [],
            "user_id": user,
            "created_before": at - timedelta(days=90) if user is None else None,
            "include_unlearned": user is not None,
            "kept": 0,
            "deleted": 0,
            "memories_forgotten": None if user is None else 0,
        }

    rows = [row(day, minute, finished=minute == 30) for day in range(1, 1101) for minute in (0, 30)]
    rows += [row(1101, 0, finished=False, user="ann"), row(1102, 0, finished=True, user="ann")]
    rows += [row(1103 + k // 100, k % 100, finished=True, user=f"u{k}") for k in range(500)]
    # the admin's deletions of named episodes: one covered by a later run naming more, one not
    named = {"named": 2, "episode_ids": ["a", "b"], "created_before": None}
    rows += [{**row(1200, 0, finished=False), **named}, {**row(1200, 5, finished=False), **named, "id": "lone"}]
    rows += [{**row(1200, 2, finished=True), "named": 3, "episode_ids": ["b", "c", "a"], "created_before": None}]
    uncovered = row(1300, 0, finished=False)
    with EpisodeLog(migrated_url) as log:
        with log.engine.begin() as conn:
            conn.execute(insert(DeletionRow), [*rows, uncovered])
        found = log.unfinished_deletions()
    assert [e.id for e in found] == ["lone", uncovered["id"]]


def test_a_later_finished_run_covers_an_unfinished_one_only_when_it_asked_for_as_much() -> None:
    from datetime import UTC, datetime

    from memabra.storage import DeletionEntry

    t = datetime(2026, 12, 5, 12, tzinfo=UTC)

    def run(
        at: int,
        *,
        ids: tuple[str, ...] = (),
        user: str | None = None,
        before: int | None = None,
        unlearned: bool = False,
    ) -> DeletionEntry:
        started = t + timedelta(hours=at)
        cutoff = None if before is None else t - timedelta(days=before)
        return DeletionEntry("e", started, started, started, "cli", None, len(ids), ids, user, cutoff, unlearned, 0, 0)

    died = run(0, before=90)
    assert run(24, before=89).covers(died)  # the next day's retention job, with its later cut-off
    assert not run(24, before=91).covers(died) and not run(-1, before=89).covers(died)
    assert not run(24, before=89, user="ann").covers(died)
    erasure = run(0, user="ann", unlearned=True)
    assert run(1, user="ann", unlearned=True).covers(erasure) and run(1, unlearned=True, before=None).covers(erasure)
    assert not run(1, user="ann").covers(erasure)  # kept episodes a learner had not read
    assert not run(1, before=0, unlearned=True).covers(erasure)
    named = run(0, ids=("a", "b"))
    assert run(1, ids=("b", "a", "c")).covers(named) and not run(1, ids=("a",)).covers(named)
    assert run(1, user="ann").covers(run(0, ids=("a",), user="ann")) and not run(1, ids=("a",)).covers(erasure)
