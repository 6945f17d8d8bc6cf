"""``memabra bench --log-db``: a log that `ope log` can check against one run's report, and no
other: a second run writing to it meanwhile is stopped, and a run stopped midway says its log is
partial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.bench_rounds import bench_round

from memabra import ConfigError
from memabra._cli._bench import bench
from memabra.evals.bench import DecisionLogWriter, load_rounds, router_factories, run_bench
from memabra.router import Similarity
from memabra.storage import EpisodeLog


def _rounds_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(json.dumps(bench_round(i)) + "\n" for i in range(n)))
    return path


def _logged(url: str) -> int:
    with EpisodeLog(url) as log:
        return sum(1 for _ in log.iter_selections())


def test_a_second_run_started_on_the_same_new_log_is_stopped_before_it_mixes_its_decisions(
    tmp_path: Path, db_url: str
) -> None:
    rounds = load_rounds(_rounds_file(tmp_path, 6))
    factories = router_factories(["hybrid"], Similarity(encoder=None))
    first = DecisionLogWriter(db_url)
    second = DecisionLogWriter(db_url)  # opened while the log was still empty: both pass the check
    with first:
        run_bench(rounds, factories, 1, 0, on_decision=first)
    run_bench(rounds, factories, 1, 1, on_decision=second)
    with pytest.raises(ConfigError, match="another process wrote to it during the run"):
        second.close()
    assert _logged(db_url) == 6  # the first run's decisions alone
    second.close()  # nothing left to write: closing again does not raise


def test_a_run_stopped_midway_says_its_log_is_partial(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import memabra.evals.bench as bench_module

    real = bench_module.run_bench

    def interrupted(*args: object, on_decision: DecisionLogWriter, **kwargs: object) -> object:
        calls = 0

        def hook(*decision: object) -> None:
            nonlocal calls
            calls += 1
            if calls > 5:
                raise KeyboardInterrupt  # Ctrl-C during the logger's first pass
            on_decision(*decision)  # type: ignore[arg-type]

        return real(*args, on_decision=hook, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bench_module, "run_bench", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench(_rounds_file(tmp_path, 8), routers="hybrid,random", passes=2, lexical=True, log_db=db_url)
    err = capsys.readouterr().err
    assert "stopped before it finished" in err and "holds 5 of the 16 decisions hybrid" in err
    assert _logged(db_url) == 5  # what was decided before the stop, each decision whole
