"""What a reader of a bench report needs to rerun it: the routers' arguments and the software the
run used, in the single-seed and the multi-seed JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import typer
from bench.bench_rounds import bench_round
from typer.testing import CliRunner

import memabra
from memabra._cli._bench import bench
from memabra.evals.bench import bench_environment, bench_router_params, router_factories
from memabra.evals.bench._provenance import _source_commit
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


def _repo(path: Path, text: str = "one\n") -> str:
    """A git repository at ``path`` with one commit of one file; its commit."""
    path.mkdir()

    def git(*args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    git("init", "-q")
    (path / "f.txt").write_text(text, encoding="utf-8")
    git("add", "f.txt")
    git("commit", "-q", "-m", "one")
    return git("rev-parse", "HEAD")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_commit_is_memabras_even_under_another_repositorys_git_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bench run from another repository's git hook inherits its GIT_DIR (and GIT_INDEX_FILE):
    git then answered for that repository, and the report named its commit as memabra's."""
    mine = _repo(tmp_path / "memabra")
    other = _repo(tmp_path / "other", "two\n")
    assert mine != other
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "other" / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "other" / ".git" / "index"))
    assert _source_commit(tmp_path / "memabra") == {"commit": mine, "modified": False}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_reading_the_commit_writes_nothing_in_the_repository(tmp_path: Path) -> None:
    """``git status`` refreshes a stale index by rewriting it under index.lock: a developer's own
    ``git commit`` at that moment failed ("index.lock: File exists")."""
    commit = _repo(tmp_path / "memabra")
    index = tmp_path / "memabra" / ".git" / "index"
    time.sleep(0.01)
    os.utime(tmp_path / "memabra" / "f.txt")  # same content, newer time: the index's stat data is stale
    before = index.stat()
    assert _source_commit(tmp_path / "memabra") == {"commit": commit, "modified": False}
    after = index.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_no_commit_outside_a_checkout(tmp_path: Path) -> None:
    assert _source_commit(tmp_path) is None
