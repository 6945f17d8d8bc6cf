"""``--json`` on the commands a CI job or cron script runs and then has to check: ``simulate``,
``learner``, ``policies import``, ``policies forget-learner``, ``rewards recompute``, ``db upgrade``,
``db downgrade`` and ``db restore`` (``mempo score``: tests/mempo/test_mempo_score_json.py).

Each writes one JSON document, alone on standard output with ``--json -`` (its lines go to stderr),
that a script reads with ``jq`` instead of parsing a sentence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.learning_log import log_final
from typer.testing import CliRunner

from factories import episode
from memabra._cli import app
from memabra._cli._production import LEASE_HELD_EXIT
from memabra._feedback import RewardService
from memabra._learner import DEFAULT_POLICY
from memabra.storage import EpisodeLog, LearnerLease, LearnerStore, head_revision, known_revisions, upgrade

runner = CliRunner(env={"COLUMNS": "200"})


def _json(args: list[str], exit_code: int = 0) -> tuple[dict[str, Any], str]:
    """Run a command with ``--json -``: its document (all that stdout holds) and its stderr."""
    result = runner.invoke(app, [*args, "--json", "-"])
    assert result.exit_code == exit_code, (args, result.output)
    return json.loads(result.stdout), result.stderr


def test_simulate_writes_each_routers_figures(tmp_path: Path) -> None:
    args = ["simulate", "--rounds", "120", "--window", "50", "--routers", "hybrid,random"]
    report, stderr = _json(args)
    assert (report["rounds"], report["seed"], report["window"], report["similarity"]) == (120, 0, 50, "bm25")
    assert set(report["routers"]) == {"hybrid", "random"}
    for figures in report["routers"].values():
        assert abs(figures["reward"] - figures["share_of_oracle"] * figures["oracle"]) < 1e-9
        assert figures["tokens"] > 0
    assert "share of oracle" in stderr  # the table, off standard output
    out = tmp_path / "sim.json"
    assert runner.invoke(app, [*args, "--json", str(out)]).exit_code == 0
    assert json.loads(out.read_text())["routers"] == report["routers"]  # seeded: the same figures


def test_learner_json_says_what_it_learned_committed_and_where_it_stands(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        ids = log_final(log, 25)
    run, stderr = _json(["learner", "--once", "--db", migrated_url, "--commit-every", "10"])
    assert (run["policy"], run["learned"], run["lineage_learned"]) == (DEFAULT_POLICY, 25, 25)
    assert run["lease_held_by"] is None
    assert run["position"]["seq"] >= 0 and run["position"]["episode_id"] in ids
    assert run["snapshot"]["version"].endswith("+25") and run["snapshot"]["status"] == "active"
    assert "learned 25 rewards in this run" in stderr
    with EpisodeLog(migrated_url) as log:
        assert LearnerStore(log.engine).active_version(DEFAULT_POLICY) == run["snapshot"]["version"]

    again, _ = _json(["learner", "--once", "--db", migrated_url])
    assert (again["learned"], again["lineage_learned"], again["snapshot"]) == (0, 25, None)
    assert again["position"] == run["position"]

    replay_file = tmp_path / "replay.bin"
    replayed, _ = _json(["learner", "--replay", "--db", migrated_url, "--out", str(replay_file)])
    assert replayed == {"policy": DEFAULT_POLICY, "replayed": 25, "out": str(replay_file)}
    assert replay_file.stat().st_size > 0


def test_learner_once_json_names_the_lease_holder_before_exit_3(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 3)
        lease = LearnerLease(log.engine, DEFAULT_POLICY)
        assert lease.acquire()
        try:
            busy, _ = _json(["learner", "--once", "--db", migrated_url], exit_code=LEASE_HELD_EXIT)
        finally:
            lease.release()
    assert busy["learned"] == 0 and busy["snapshot"] is None
    assert isinstance(busy["lease_held_by"], str) and busy["lease_held_by"]


def test_policies_import_and_forget_learner_json(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 6)
    # two commits: the active snapshot's parent is the first, which the staging log does not hold
    assert runner.invoke(app, ["learner", "--once", "--db", migrated_url, "--commit-every", "3"]).exit_code == 0
    doc = tmp_path / "active.json"
    exported = runner.invoke(app, ["policies", "export", "--whole", "--db", migrated_url, "--out", str(doc)])
    assert exported.exit_code == 0, exported.output
    staging = f"sqlite:///{tmp_path / 'staging.db'}"
    upgrade(staging)

    imported, stderr = _json(["policies", "import", str(doc), "--db", staging])
    version = json.loads(doc.read_text())["version"]
    assert imported == {
        "version": version,
        "policy": DEFAULT_POLICY,
        "imported": True,
        "status": "candidate",
        "parent": None,
        "parent_dropped": True,  # its parent lives in the other log only
    }
    assert "as a candidate" in stderr
    again, _ = _json(["policies", "import", str(doc), "--db", staging])
    assert (again["version"], again["imported"], again["status"]) == (version, False, "candidate")

    forgot, _ = _json(["policies", "forget-learner", "--policy", DEFAULT_POLICY, "--db", migrated_url])
    assert forgot == {"policy": DEFAULT_POLICY, "forgotten": True}
    twice, _ = _json(["policies", "forget-learner", "--policy", DEFAULT_POLICY, "--db", migrated_url])
    assert twice == {"policy": DEFAULT_POLICY, "forgotten": False}  # done already: exit 0 all the same


def test_rewards_recompute_json_counts_what_it_retotalled(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        for _ in range(3):
            RewardService(log).record(episode("ann"))
    done, stderr = _json(["rewards", "recompute", "--weights", "wc=0.8", "--version", "v2", "--db", migrated_url])
    assert (done["rewards"], done["labelled"], done["learned"], done["version"]) == (3, 0, 0, "v2")
    assert done["weights"]["wc"] == 0.8 and set(done["weights"]) >= {"ws", "wr", "wc"}
    assert done["since"] is None and done["mempo_scorer"] is None
    assert "recomputed 3 rewards" in stderr
    later, _ = _json(["rewards", "recompute", "--weights", "wc=0.8", "--since", "2999-01-01", "--db", migrated_url])
    assert later["rewards"] == 0 and later["since"].startswith("2999-01-01")


def test_db_upgrade_and_downgrade_json_give_the_revision_before_and_after(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    created, stderr = _json(["db", "upgrade", "--db", url])
    head = head_revision()
    assert (created["before"], created["after"], created["head"], created["changed"]) == (None, head, head, True)
    assert "new.db" in created["database"] and "schema revision" in stderr
    again, _ = _json(["db", "upgrade", "--db", url])
    assert (again["before"], again["after"], again["changed"]) == (head, head, False)

    previous = sorted(known_revisions())[-2]  # revisions are numbered 0001, 0002, ...
    down, _ = _json(["db", "downgrade", previous, "--db", url, "--yes"])
    assert (down["before"], down["after"], down["changed"]) == (head, previous, True)
    back, _ = _json(["db", "upgrade", "--db", url])
    assert (back["before"], back["after"], back["changed"]) == (down["after"], head, True)
    gone, _ = _json(["db", "downgrade", "base", "--db", url, "--yes"])
    assert (gone["before"], gone["after"]) == (head, None)  # no schema: null, as `db current --json` says


def test_db_restore_json_describes_the_restored_log(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        log_final(log, 4)
    backup = tmp_path / "b.db"
    assert runner.invoke(app, ["db", "backup", "--db", url, "--out", str(backup)]).exit_code == 0
    with EpisodeLog(url) as log:
        log_final(log, 2, start=4)
    restored, stderr = _json(["db", "restore", "--from", str(backup), "--db", url, "--yes"])
    assert restored["episodes"] == 4 and restored["revision"] == head_revision()
    assert restored["path"] == str(tmp_path / "live.db") and restored["backup"] == str(backup)
    assert restored["upgrade_needed"] is False and restored["size_bytes"] > 0
    assert "restored" in stderr
