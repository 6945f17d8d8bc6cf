"""What ``train_from_log`` writes: the candidate snapshot and the OPE run that judged it go into the
log together or not at all, and the counts it reports are those of the decisions it read."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import text

from logged_world import reward_of, world
from memabra import Episode, InvalidRecordError
from memabra._records import utcnow
from memabra.evals.offline import train_from_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog


def _log_batches(log: EpisodeLog, batches: int, size: int) -> None:
    """``batches`` groups of ``size`` decisions, each group made at one instant (an imported log, a
    clock that ticks coarsely), every reward final."""
    router = RandomRouter(similarity=Similarity(encoder=None), seed=1)
    start = utcnow() - timedelta(hours=batches)
    episodes = []
    for i in range(batches * size):
        at = start + timedelta(hours=i // size)
        ctx, cands, relevant = world(i)
        sel = replace(router.choose(ctx, cands), created_at=at)
        episodes.append(
            Episode("u1", ctx.query, selections=(sel,), reward=reward_of(sel, relevant), finalized_at=at, created_at=at)
        )
    log.log_episodes(episodes)


def _refuse_ope_rows(log: EpisodeLog) -> None:
    """A database that takes the snapshot but refuses the OPE rows (a full disk, a lost connection
    or a kill between the two writes would leave the same)."""
    with log.engine.begin() as connection:
        if connection.dialect.name == "sqlite":
            connection.execute(
                text("CREATE TRIGGER refuse_ope BEFORE INSERT ON ope_runs BEGIN SELECT RAISE(ABORT, 'disk full'); END")
            )
        else:
            connection.execute(
                text(
                    "CREATE FUNCTION refuse_ope() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'disk full'; END $$"
                )
            )
            connection.execute(
                text("CREATE TRIGGER refuse_ope BEFORE INSERT ON ope_runs FOR EACH ROW EXECUTE FUNCTION refuse_ope()")
            )


def test_a_snapshot_is_never_kept_without_the_run_that_judged_it(log: EpisodeLog) -> None:
    _log_batches(log, 60, 1)
    _refuse_ope_rows(log)
    with pytest.raises(Exception, match="disk full"):
        train_from_log(log, force=True, holdout=0.5)
    assert log.list_snapshots() == []
    assert log.list_ope_runs() == []


def test_a_saved_snapshot_and_its_run_are_written_together(log: EpisodeLog) -> None:
    _log_batches(log, 60, 1)
    report = train_from_log(log, force=True, holdout=0.5)
    assert report.saved_version is not None
    (saved,) = log.list_snapshots()
    assert saved.version == report.saved_version and saved.status == "candidate"
    runs = log.list_ope_runs(report.saved_version)
    assert runs and {r.run_id for r in runs} == {report.estimate.run_id}


def test_decisions_at_the_split_instant_are_counted_on_the_side_they_are_read(log: EpisodeLog) -> None:
    _log_batches(log, 3, 10)  # 30 decisions at 3 instants: the split (position 24) falls inside the third
    report = train_from_log(log, force=True, holdout=0.2)
    assert (report.n_train, report.n_holdout) == (20, 10)
    assert report.saved_version is not None
    assert log.get_snapshot(report.saved_version).metrics["n_train"] == 20


def test_a_log_made_at_one_instant_leaves_nothing_to_train_on(log: EpisodeLog) -> None:
    _log_batches(log, 1, 30)
    with pytest.raises(InvalidRecordError, match="nothing is left to train on"):
        train_from_log(log, force=True)
    assert log.list_snapshots() == []


def test_a_log_of_provisional_rewards_says_how_to_train_on_them(log: EpisodeLog) -> None:
    router = RandomRouter(similarity=Similarity(encoder=None), seed=1)
    episodes = []
    for i in range(30):
        ctx, cands, relevant = world(i)
        sel = router.choose(ctx, cands)
        episodes.append(Episode("u1", ctx.query, selections=(sel,), reward=reward_of(sel, relevant)))
    log.log_episodes(episodes)
    with pytest.raises(InvalidRecordError, match="30 more have a provisional reward only.*--include-provisional"):
        train_from_log(log)
    assert train_from_log(log, include_provisional=True, force=True).n_train > 0


def test_a_name_another_training_run_took_meanwhile_gives_way_to_the_next(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nightly trainings of one policy finishing together chose the same free name; the second
    failed after its whole run ("a snapshot with version ... already exists")."""
    from memabra.evals.offline import _train

    _log_batches(log, 60, 1)
    chosen = _train.unused_snapshot_version
    raced: list[str] = []

    def taken_meanwhile(log_: EpisodeLog, version: str) -> str:
        name = chosen(log_, version)
        if not raced:  # the other run saves its candidate under the same name first
            other = RandomRouter(seed=2).snapshot()
            log_.save_snapshot(replace(other, version=name, status="candidate"))
            raced.append(name)
        return name

    monkeypatch.setattr(_train, "unused_snapshot_version", taken_meanwhile)
    report = train_from_log(log, force=True, holdout=0.5)
    assert report.saved_version is not None and report.saved_version != raced[0]
    assert log.get_snapshot(report.saved_version).status == "candidate"
    runs = log.list_ope_runs(report.saved_version)
    assert runs and all(r.snapshot_version == report.saved_version for r in runs)
