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


class Unreachable(Softmax):
    # builds only where its feature store answers: a test turns it off

    name = "softmax"
    reachable = True

    def __init__(self, **kwargs):
        if not Unreachable.reachable:
            raise RuntimeError("cannot connect to the feature store")
        super().__init__(**kwargs)


def make_unreachable(seed):
    raise KeyError("MODEL_PATH")
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


def test_a_snapshot_of_a_router_of_one_s_own_resolves_from_its_class_and_bad_forms_are_named(
    log: EpisodeLog, module: str
) -> None:
    from memabra._records import PolicySnapshot
    from memabra.evals._router_paths import router_target

    softmax = router_target(f"{module}:Softmax")
    snapshot = softmax(temperature=2.0).snapshot()  # type: ignore[call-arg, union-attr]
    assert isinstance(snapshot, PolicySnapshot)
    log.save_snapshot(snapshot)
    version = snapshot.version
    resolved = resolve_policy(f"snapshot:{version}:{module}:Softmax", log)
    assert resolved.snapshot_version == version and resolved.router.get_params()["temperature"] == 2.0
    with pytest.raises(ConfigError, match=f"snapshot:{version}:module:Class"):
        resolve_policy(f"snapshot:{version}", log)
    with pytest.raises(ConfigError, match="no snapshot with version"):
        resolve_policy(f"snapshot:{version}:not a path", log)
    with pytest.raises(ConfigError, match="not a factory function"):
        resolve_policy(f"active:{module}:make", log)
    with pytest.raises(ConfigError, match="no active snapshot of softmax"):
        resolve_policy(f"active:{module}:Softmax", log)


def test_a_router_of_one_s_own_that_fails_to_build_is_named_not_a_traceback(
    log: EpisodeLog, module: str, migrated_url: str
) -> None:
    from memabra.evals._router_paths import router_target

    unreachable = router_target(f"{module}:Unreachable")
    snapshot = unreachable().snapshot()  # type: ignore[call-arg, union-attr]
    log.save_snapshot(snapshot)
    unreachable.reachable = False  # type: ignore[union-attr]
    spec = f"{module}:Unreachable"
    with pytest.raises(ConfigError, match=f"router '{spec}' failed to build: RuntimeError: cannot connect"):
        resolve_policy(spec, log)
    with pytest.raises(ConfigError, match="failed to build: KeyError: 'MODEL_PATH'"):
        resolve_policy(f"{module}:make_unreachable", log)
    with pytest.raises(
        ConfigError, match=f"snapshot {snapshot.version} no longer loads .*RuntimeError: cannot connect"
    ):
        resolve_policy(f"snapshot:{snapshot.version}:{spec}", log)
    result = CliRunner().invoke(app, ["ope", "log", "--db", migrated_url, "--policy", spec, "--no-store"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert "cannot connect to the feature store" in result.output


def test_a_target_name_too_long_to_store_is_refused_before_the_evaluation(
    migrated_url: str,
    module: str,
) -> None:
    # the log holds no decision: the old code evaluated first, and said only that
    spec = f'{module}:Softmax:{{"temperature": 0.{"5" * 200}}}'
    result = CliRunner().invoke(app, ["ope", "log", "--db", migrated_url, "--policy", spec])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    said = " ".join(result.output.split())
    assert "holds at most 200 characters" in said and "--no-store" in said, said
    unstored = CliRunner().invoke(app, ["ope", "log", "--db", migrated_url, "--policy", spec, "--no-store"])
    assert "no rewarded decisions" in unstored.output  # --no-store evaluates it
