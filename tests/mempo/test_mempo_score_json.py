"""``memabra mempo score --json``: what a nightly scoring job stored, left out or found nothing to do,
as one JSON document (alone on standard output with ``--json -``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra.storage import EpisodeLog

from .test_mempo_cli import _log_decisions

pytest.importorskip("torch", reason="the MemPO scorer needs the mempo extra (torch)")

import memabra._cli._mempo as cli  # noqa: E402

runner = CliRunner(env={"COLUMNS": "200"})


def test_score_json_counts_what_was_scored_and_stored(trained_model_dir: Path, migrated_url: str) -> None:
    _log_decisions(migrated_url)
    options = ["score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu", "--json", "-"]
    result = runner.invoke(cli.mempo_app, options)
    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout)  # the document alone; the lines went to stderr
    assert done["scorer"] == f"mempo:{trained_model_dir.name}" and done["device"] == "cpu"
    assert (done["total"], done["scored"], done["as_good"], done["worse"], done["unscorable"]) == (4, 4, 0, 4, 0)
    assert done["tokens"] > 0 and done["seconds"] >= 0 and done["reason"] is None
    assert done["first_unscorable"] is None
    assert "scored 4 decisions" in result.stderr

    again = runner.invoke(cli.mempo_app, options)
    assert again.exit_code == 0, again.output
    nothing = json.loads(again.stdout)
    assert (nothing["total"], nothing["scored"], nothing["reason"]) == (0, 0, "all_labelled")


def test_score_json_is_written_before_the_exit_1_of_unscorable_decisions(
    trained_model_dir: Path, migrated_url: str, tmp_path: Path
) -> None:
    from memabra import Feedback

    _log_decisions(migrated_url)
    with EpisodeLog(migrated_url) as log:
        episode = log.list_episodes(limit=1).items[0]
        log.add_feedback(Feedback(episode.id, "programmatic", "checker", {"gold_answer": "paris " * 300}))
    out = tmp_path / "score.json"
    options = ["score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu", "--json", str(out)]
    result = runner.invoke(cli.mempo_app, options)
    assert result.exit_code == 1, result.output
    done = json.loads(out.read_text())
    assert (done["total"], done["scored"], done["unscorable"]) == (4, 3, 1)
    assert "256 positions" in done["first_unscorable"]


def test_score_json_says_why_there_was_nothing_to_score(tmp_path: Path, migrated_url: str) -> None:
    (tmp_path / "config.json").write_text("{}")  # what a model directory holds, but nothing loadable
    (tmp_path / "model.safetensors").write_bytes(b"")
    result = runner.invoke(cli.mempo_app, ["score", "--model", str(tmp_path), "--db", migrated_url, "--json", "-"])
    assert result.exit_code == 0, result.output
    nothing = json.loads(result.stdout)
    assert (nothing["scored"], nothing["reason"], nothing["device"]) == (0, "no_gold_answers", None)


def test_score_json_says_what_a_stopped_run_stored(trained_model_dir: Path, migrated_url: str, tmp_path: Path) -> None:
    # a scheduler's SIGTERM at its deadline: the nightly job reads what was stored from the JSON
    import os
    import signal
    import subprocess
    import sys
    import time

    from .test_mempo_stops import _SLOWED_COMMAND, _labels

    decision_ids = _log_decisions(migrated_url)
    out = tmp_path / "score.json"
    command = ["mempo", "score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOWED_COMMAND, *command, "--chunk-size", "1", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
    )
    try:
        deadline = time.monotonic() + 120
        while _labels(migrated_url, decision_ids) < 1:  # the first chunk is stored
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143
    done = json.loads(out.read_text())
    assert (done["total"], done["scored"], done["reason"]) == (4, 1, "stopped")
    assert done["as_good"] + done["worse"] == 1 and done["device"] == "cpu"
