"""``memabra ope log --policy module:Class`` evaluates a router of one's own, as ``memabra bench
--routers`` benches it: the same import paths work in both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra import ConfigError
from memabra._cli import app
from memabra.evals.offline import resolve_policy
from memabra.storage import EpisodeLog

MODULE = """
import numpy as np

from memabra.router import HybridRouter, Router, Similarity


class Softmax(Router):
    name = "softmax"

    def __init__(self, temperature=1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature

    def _slot_distribution(self, view):
        z = view.table.column("hyb_z")[view.rows] / self.temperature
        p = np.exp(z - z.max())
        out = np.full(view.n_options, 0.05)
        out[:-1] = 0.95 * p / p.sum()
        return out


def make(seed):
    return HybridRouter(seed=seed, similarity=Similarity(encoder=None))
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of routers in the current directory, as a user running `memabra ope log` has it."""
    name = f"own_policies_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    return name


def test_a_class_with_arguments_or_a_factory_resolves(log: EpisodeLog, module: str) -> None:
    softmax = resolve_policy(f'{module}:Softmax:{{"temperature": 0.5}}', log)
    assert softmax.router.name == "softmax" and softmax.router.get_params()["temperature"] == 0.5
    assert softmax.snapshot_version is None
    assert resolve_policy(f"{module}:make", log).router.name == "hybrid"
    with pytest.raises(ConfigError, match="is a factory: it takes a seed, not arguments"):
        resolve_policy(f'{module}:make:{{"x": 1}}', log)
    with pytest.raises(ConfigError, match="bad arguments for router"):
        resolve_policy(f'{module}:Softmax:{{"nope": 1}}', log)
    with pytest.raises(ConfigError, match="has no attribute 'Missing'"):
        resolve_policy(f"{module}:Missing", log)


def test_the_cli_evaluates_a_router_of_one_s_own(migrated_url: str, fill_log, module: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        fill_log(log, n=120)
    out = tmp_path / "ope.json"
    args = ["ope", "log", "--db", migrated_url, "--policy", f"{module}:Softmax", "--no-store", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "on 120 logged decisions" in result.output
    assert f"{module}:Softmax" in json.loads(out.read_text())["policies"]
