"""Several seeds of one bench: the seed list, the summary over seeds and the CLI's ``--seeds``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from memabra import ConfigError
from memabra._cli._bench import bench
from memabra.evals.bench import load_rounds, parse_seeds, router_factories, run_bench, seed_metrics, summarize_seeds
from memabra.router import Similarity


def _tiny(tmp_path: Path) -> Path:
    topics = ["weather forecast", "divorce lawyer", "pizza recipe", "flight booking"]
    rows = []
    for i in range(12):
        candidates = [
            {"id": f"t-{c}", "kind": "tool", "text": f"{c} tool for {topics[j % 4]}", "tokens": 10 + j}
            for j, c in enumerate("abcd")
        ]
        rows.append(
            {
                "id": f"r{i}",
                "query": f"question {i} about {topics[i % 4]}",
                "candidates": candidates,
                "relevant": [f"t-{'abcd'[i % 4]}"],
                "slots": 1,
                "group": "g",
            }
        )
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("spec", "seeds"),
    [("0-4", (0, 1, 2, 3, 4)), ("0,3,7", (0, 3, 7)), ("0-2,9", (0, 1, 2, 9)), ("2, 2-3 ,", (2, 3)), ("5-5", (5,))],
)
def test_seed_lists_and_ranges(spec: str, seeds: tuple[int, ...]) -> None:
    assert parse_seeds(spec) == seeds


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "name no seed"),
        ("a", "seed 'a' is not a seed"),
        ("-1", "seed '-1' is not a seed"),
        ("3-1", "seed range '3-1' must run"),
        ("0-5000", "more than 1000 seeds"),
    ],
)
def test_bad_seed_lists_name_the_part(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_seeds(spec)


def test_the_summary_spreads_each_metric_over_the_seeds_and_keeps_every_run(tmp_path: Path) -> None:
    rounds = load_rounds(_tiny(tmp_path))
    factories = router_factories(["hybrid", "random"], similarity=Similarity())
    reports = [run_bench(rounds, factories, passes=2, seed=s, source="tiny.jsonl") for s in (0, 1, 2)]
    summary = summarize_seeds(reports)
    assert summary["seeds"] == [0, 1, 2] and summary["runs"] == reports
    assert (summary["file"], summary["rounds"], summary["passes"]) == ("tiny.jsonl", 12, 2)
    for name in ("hybrid", "random"):
        metrics = seed_metrics(reports[0], name)
        # every scalar of the report but the timings, which say nothing about the seed
        assert {"hit_rate_unseen", "tokens_mean_unseen", "recall", "tokens_mean_last_pass"} <= set(metrics)
        assert not {"decision_ms_p50", "decision_ms_p99", "learning_curve"} & set(metrics)
        assert set(summary["summary"][name]) == set(metrics)
        for metric in metrics:
            values = [r["routers"][name][metric] for r in reports]
            spread = summary["summary"][name][metric]
            assert spread["values"] == values
            assert spread["min"] == min(values) and spread["max"] == max(values)
            assert spread["median"] == sorted(values)[1]
    with pytest.raises(ValueError, match="at least one report"):
        summarize_seeds([])


def test_cli_runs_each_seed_and_writes_the_summary(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(bench)
    tiny, out = _tiny(tmp_path), tmp_path / "seeds.json"
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(
        app, [str(tiny), "--routers", "hybrid,random", "--passes", "1", "--seeds", "0-1", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "2 seeds (0, 1): median [min, max]" in result.output and "unseen tokens" in result.output
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["seeds"] == [0, 1] and [run["seed"] for run in document["runs"]] == [0, 1]
    # each run is the single-seed document, so tools that read one report read each run
    single = runner.invoke(
        app,
        [str(tiny), "--routers", "hybrid,random", "--passes", "1", "--seed", "1", "--json", str(tmp_path / "one.json")],
    )
    assert single.exit_code == 0, single.output
    one = json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))
    assert one["routers"]["hybrid"]["hit_rate_unseen"] == document["runs"][1]["routers"]["hybrid"]["hit_rate_unseen"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--log-db", "sqlite:///x.db"], "--log-db writes one run"),
        (["--plot", "curve.png"], "--plot writes one run"),
        (["--seed", "3"], "either --seed or --seeds"),
        (["--seeds", "x"], "seed 'x' is not a seed"),
    ],
)
def test_cli_refuses_what_several_seeds_cannot_mean(tmp_path: Path, extra: list[str], message: str) -> None:
    app = typer.Typer()
    app.command()(bench)
    args = [str(_tiny(tmp_path)), "--routers", "hybrid"]
    if "--seeds" not in extra:
        args += ["--seeds", "0-1"]
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, [*args, *extra])
    assert result.exit_code == 1 and message in result.output
    assert not (tmp_path / "x.db").exists()
