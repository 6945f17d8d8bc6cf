"""``memabra bench`` runs a router of one's own, named by import path, next to the built-in ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from memabra import ConfigError
from memabra._cli._bench import bench
from memabra.evals.bench import load_rounds, router_factories, run_bench
from memabra.router import HybridRouter, Similarity

MODULE = """
from memabra.router import HybridRouter, RandomRouter, Similarity


class MyRouter(RandomRouter):
    name = "mine"


def make(seed):
    return HybridRouter(seed=seed, similarity=Similarity())


not_a_router = 3
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module of routers in the current directory, as a user running `memabra bench` has it."""
    name = f"my_routers_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    rows = [
        {
            "id": f"r{i}",
            "query": f"question {i} about the weather",
            "candidates": [{"id": f"t-{c}", "kind": "tool", "text": f"{c} weather tool", "tokens": 10} for c in "abc"],
            "relevant": ["t-a"],
            "slots": 1,
        }
        for i in range(6)
    ]
    (tmp_path / "tiny.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop(name, None)


def _module(here: Path) -> str:
    return next(p.stem for p in here.glob("my_routers_*.py"))


def test_a_router_class_or_factory_by_import_path(here: Path) -> None:
    module = _module(here)
    factories = router_factories(["hybrid", f"{module}:MyRouter", f"{module}:make"], Similarity())
    assert factories[f"{module}:MyRouter"](3).name == "mine" and factories[f"{module}:MyRouter"](3).seed == 3
    assert isinstance(factories[f"{module}:make"](1), HybridRouter)
    report = run_bench(load_rounds(here / "tiny.jsonl"), factories, passes=1, seed=0)
    assert set(report["routers"]) == {"hybrid", f"{module}:MyRouter", f"{module}:make"}
    assert str(here) not in sys.path  # the current directory is searched, not left on the path


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:R", "cannot import 'no_such_module_xyz'"),
        ("{module}:Missing", "has no attribute 'Missing'"),
        ("{module}:not_a_router", "not a memabra.router.Router subclass or a function taking a seed"),
        ("{module}:", "module:Class or module:function"),
        ("oracle", "or name a router of your own as module:Class"),
    ],
)
def test_a_bad_import_path_is_named(here: Path, spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        router_factories([spec.format(module=_module(here))], Similarity())


def test_the_cli_benches_a_custom_router(here: Path) -> None:
    app = typer.Typer()
    app.command()(bench)
    spec = f"{_module(here)}:MyRouter"
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["tiny.jsonl", "--routers", f"hybrid,{spec}", "--passes", "1", "--json", "out.json"]
    )
    assert result.exit_code == 0, result.output
    assert set(json.loads((here / "out.json").read_text())["routers"]) == {"hybrid", spec}
