"""``memabra mempo score`` stopped by a job scheduler (SIGTERM) says what it stored and exits 143,
as Ctrl-C says it and exits 130; a stop that arrives while a chunk is being stored waits for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memabra._cli._stops import Stopped, StopSignals, exit_code, stopped_by
from memabra.storage import EpisodeLog

from .test_mempo_cli import _log_decisions

# the real command, with the scorer pausing after each chunk it hands over (stored by then), so
# the test's SIGTERM lands mid-run instead of racing a tiny model that scores four decisions at once
_SLOWED_COMMAND = """
import sys, time
from memabra.evals.mempo import MemPOScorer
real = MemPOScorer.score_routing_decisions
def slowed(self, *args, **kwargs):
    for chunk in real(self, *args, **kwargs):
        yield chunk
        time.sleep(120)
MemPOScorer.score_routing_decisions = slowed
from memabra._cli._app import app
app(sys.argv[1:], prog_name="memabra")
"""


def _labels(url: str, decision_ids: list[str]) -> int:
    with EpisodeLog(url) as log:
        return len(log.memory_scores(decision_ids))


def test_sigterm_says_what_was_stored_and_exits_143(trained_model_dir: Path, migrated_url: str) -> None:
    decision_ids = _log_decisions(migrated_url)
    command = ["mempo", "score", "--model", str(trained_model_dir), "--db", migrated_url, "--device", "cpu"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOWED_COMMAND, *command, "--chunk-size", "1"],
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
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    said = " ".join((out + err).split())
    assert proc.returncode == 143, said
    assert "stopped by SIGTERM: 1 of 4 decisions scored and stored; the same command scores the rest" in said
    assert _labels(migrated_url, decision_ids) == 1  # what it says it stored, and nothing more


def test_a_stop_during_a_store_waits_for_the_store_to_end() -> None:
    stops = StopSignals()
    stored = []
    with stops.installed(), pytest.raises(Stopped) as caught, stops.storing():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # where the handler runs: it must not raise inside the store
        stored.append("chunk")
    assert stored == ["chunk"]
    assert exit_code(caught.value) == 143 and stopped_by(caught.value) == "stopped by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the process's own handler is back


def test_ctrl_c_keeps_its_exit_code_and_wording() -> None:
    assert exit_code(KeyboardInterrupt()) == 130 and stopped_by(KeyboardInterrupt()) == "interrupted"
    assert exit_code(Stopped(signal.SIGINT)) == 130


def test_a_stop_before_scoring_says_nothing_was_stored(
    tmp_path: Path, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM while the log's decisions are counted (seconds on a large log) exits 143 saying so,
    not as click's "Aborted!" with exit 1."""
    pytest.importorskip("torch", reason="the MemPO scorer needs the mempo extra (torch)")
    from typer.testing import CliRunner

    from memabra._cli._mempo import mempo_app

    (tmp_path / "config.json").write_text("{}")  # what a model directory holds
    (tmp_path / "model.safetensors").write_bytes(b"")

    def stopped_while_counting(*args: object, **kwargs: object) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # where the handler runs
        raise AssertionError("SIGTERM did not stop the count")

    monkeypatch.setattr(EpisodeLog, "count_mempo_items", stopped_while_counting)
    result = CliRunner(env={"COLUMNS": "300"}).invoke(
        mempo_app, ["score", "--model", str(tmp_path), "--db", migrated_url]
    )
    assert result.exit_code == 143, result.output
    assert "stopped by SIGTERM before scoring began: no decision scored or stored" in " ".join(result.output.split())
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
