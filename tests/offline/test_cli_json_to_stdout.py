"""``memabra ope log --json -`` and ``memabra ope arrays --json -``: the JSON alone on standard
output (for ``| jq``) and the tables on stderr, as every other command's ``--json -``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from memabra._cli import app
from memabra.evals import ope
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "240"})


def test_ope_log_writes_its_json_alone_to_standard_output(migrated_url: str, fill_log) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        fill_log(log, n=40)
    args = ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "snpi", "--no-store"]
    result = runner.invoke(app, [*args, "--json", "-"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["policies"] and report["n_rounds"] > 0
    assert "offline evaluation" in result.stderr and "wrote" not in result.output


def test_ope_arrays_writes_its_json_alone_to_standard_output(tmp_path: Path) -> None:
    log = ope.SyntheticBandit(len_list=1).sample(300, random_state=0)
    path = tmp_path / "log.npz"
    np.savez(
        path,
        action=log.arrays.action,
        reward=log.arrays.reward,
        pscore=log.arrays.pscore,
        action_dist=log.arrays.action_dist,
        estimated_rewards=log.expected_reward,
    )
    result = runner.invoke(app, ["ope", "arrays", str(path), "--estimators", "ipw,dm", "--ci", "normal", "--json", "-"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)["estimates"]) == {"ipw", "dm"}
    assert "log.npz" in result.stderr and "wrote" not in result.output
