"""The nightly job's loop: train a candidate from the log, promote it, roll it back, on a log that
serves several policies (the operator switched linear → vw once)."""

from __future__ import annotations

from runtime.learning_log import log_final
from sqlalchemy import text
from typer.testing import CliRunner

from memabra._cli._app import app
from memabra._learner import Learner, fresh_router
from memabra.evals.offline import train_from_log
from memabra.storage import EpisodeLog, LearnerStore, SnapshotAudit


def _serve_two_policies(log: EpisodeLog) -> tuple[str, str]:
    """A log whose linear learner published first and whose vw learner published last; returns
    their active versions."""
    log_final(log, 30)
    for policy in ("linear", "vw"):
        learner = Learner(log, lambda p=policy: fresh_router(p), policy=policy, commit_every=30)  # type: ignore[misc]
        learner.step()
        learner.close()
    store = LearnerStore(log.engine)
    linear, vw = store.active_version("linear"), store.active_version("vw")
    assert linear is not None and vw is not None
    return linear, vw


def test_a_trained_snapshot_descends_from_its_own_policys_active_snapshot(log: EpisodeLog) -> None:
    linear, vw = _serve_two_policies(log)
    report = train_from_log(log, learner="linear", holdout=0.3, force=True)
    assert report.saved_version is not None
    trained = log.get_snapshot(report.saved_version)
    assert trained.policy == "linear"
    # not the newest active snapshot of any policy (vw's): a rollback walks its own policy's line
    assert trained.parent == linear

    audit = SnapshotAudit(log)
    audit.promote(trained.version, by="op")
    assert audit.rollback(trained.version, by="op") == linear
    store = LearnerStore(log.engine)
    assert store.active_version("linear") == linear
    assert store.active_version("vw") == vw


def test_promote_and_rollback_say_where_a_rollback_goes_and_what_the_learner_does(migrated_url: str) -> None:
    """The nightly candidate names the snapshot active when it was trained; the learner has
    published since, and undoing the promote with a rollback returns to what served (the learner's
    snapshot), not to the candidate's parent (before revision 0011 it did)."""
    runner = CliRunner(env={"COLUMNS": "240"})
    with EpisodeLog(migrated_url) as log:
        log_final(log, 30)
        learner = Learner(log, lambda: fresh_router("linear"), commit_every=30)
        learner.step()
        trained_from = LearnerStore(log.engine).active_version("linear")
        report = train_from_log(log, learner="linear", holdout=0.3, force=True)
        assert report.saved_version is not None
        log_final(log, 30, start=30)
        learner.step()
        learner.close()
        serving = LearnerStore(log.engine).active_version("linear")
        newest = LearnerStore(log.engine).checkpoint("linear")
    assert trained_from is not None and serving is not None and serving != trained_from and newest is not None

    promoted = runner.invoke(app, ["policies", "promote", report.saved_version, "--db", migrated_url])
    assert promoted.exit_code == 0, promoted.output
    said = " ".join(promoted.output.split())
    assert f"rollback --policy linear` returns to {serving}" in said, said
    assert "stores its snapshots as candidates" in said, said

    back = runner.invoke(app, ["policies", "rollback", "--db", migrated_url])
    assert back.exit_code == 0, back.output
    said = " ".join(back.output.split())
    assert f"{serving} is active again, {report.saved_version} retired" in said, said
    # what the learner last published serves again: it publishes again, no candidates
    assert "as candidates" not in said, said

    # a rollback of a snapshot activated before revision 0011 (no record) still takes its parent
    with EpisodeLog(migrated_url) as log:
        learner_parent = log.get_snapshot(serving).parent
    assert learner_parent is not None
    with EpisodeLog(migrated_url) as log, log.engine.begin() as conn:
        conn.execute(text("UPDATE policy_snapshots SET previous_active = NULL"))
    again = runner.invoke(app, ["policies", "rollback", "--db", migrated_url])
    assert again.exit_code == 0, again.output
    assert f"{learner_parent} is active again" in " ".join(again.output.split()), again.output


def test_a_new_learner_takes_the_served_models_arguments_not_a_newer_candidates(migrated_url: str) -> None:
    """A learner with no checkpoint builds its router with the arguments of the policy's active
    snapshot (what the agents serve); it took the newest snapshot's, so a candidate trained with
    arguments under trial (``train --from-log --args``) set the online learner's."""
    from dataclasses import replace

    with EpisodeLog(migrated_url) as log:
        log_final(log, 30)
        served = fresh_router("linear", {"learning_rate": 0.25}).snapshot()
        log.save_snapshot(replace(served, version="served-1", status="active"))
        report = train_from_log(log, learner="linear", learner_args={"learning_rate": 0.9}, holdout=0.3, force=True)
        assert report.saved_version is not None
        assert log.get_snapshot(report.saved_version).learner_args["learning_rate"] == 0.9
    result = CliRunner().invoke(app, ["learner", "--policy", "linear", "--once", "--db", migrated_url])
    assert result.exit_code == 0, result.output
    with EpisodeLog(migrated_url) as log:
        checkpoint = LearnerStore(log.engine).checkpoint("linear")
        assert checkpoint is not None and checkpoint.snapshot_version is not None
        assert log.get_snapshot(checkpoint.snapshot_version).learner_args["learning_rate"] == 0.25
