"""What a reader of a bench report needs to rerun it: the routers' arguments and the software the
run used, in the single-seed and the multi-seed JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from bench.bench_rounds import bench_round
from typer.testing import CliRunner

import memabra
from memabra._cli._bench import bench
from memabra.evals.bench import bench_environment, bench_router_params, router_factories
from memabra.router import Similarity


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    rows = [bench_round(i, relevant=f"t-{'abcd'[i % 4]}") for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(args: list[str]) -> None:
    app = typer.Typer()
    app.command()(bench)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


def test_the_report_names_each_routers_arguments_and_the_software(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    _run([str(tiny), "--routers", "linear,hybrid", "--passes", "1", "--seed", "3", "--lexical", "--json", str(out)])
    report = json.loads(out.read_text(encoding="utf-8"))
    params = report["router_params"]
    assert list(params) == ["linear", "hybrid"]
    assert params["linear"]["class"].endswith("LinearRouter")
    # the arguments that move the figures: exploration, epsilon, the learning rate, and the seed
    assert params["linear"]["params"]["seed"] == 3
    assert {"exploration", "epsilon", "learning_rate"} <= set(params["linear"]["params"])
    env = report["environment"]
    assert env["memabra"] == memabra.__version__
    assert env["packages"]["numpy"] == np.__version__
    assert env["python"] and "scikit-learn" in env["packages"] and "vowpalwabbit" in env["packages"]


def test_the_multi_seed_report_keeps_each_runs_arguments(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    _run([str(tiny), "--routers", "linear", "--passes", "1", "--seeds", "0-1", "--lexical", "--json", str(out)])
    summary = json.loads(out.read_text(encoding="utf-8"))
    assert summary["environment"]["memabra"] == memabra.__version__
    assert [run["router_params"]["linear"]["params"]["seed"] for run in summary["runs"]] == [0, 1]


def test_provenance_is_plain_json() -> None:
    factories = router_factories(["random", "bm25"], similarity=Similarity())
    document = {"router_params": bench_router_params(factories, 0), "environment": bench_environment()}
    assert json.loads(json.dumps(document)) == document
