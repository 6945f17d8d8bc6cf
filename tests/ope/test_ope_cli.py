"""``memabra ope arrays``: the table, the JSON other tools read, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from memabra._cli._ope import ope_app
from memabra.evals import ope

ROOT = typer.Typer()
ROOT.add_typer(ope_app, name="ope")
RUNNER = CliRunner()


def _write(path: Path, *, with_model: bool, with_context: bool = False, position: bool = False) -> ope.SyntheticLog:
    log = ope.SyntheticBandit(len_list=2 if position else 1).sample(1500, random_state=0)
    arrays = {
        "action": log.arrays.action,
        "reward": log.arrays.reward,
        "pscore": log.arrays.pscore,
        "action_dist": log.arrays.action_dist,
    }
    if position:
        assert log.arrays.position is not None
        arrays["position"] = log.arrays.position
    if with_model:
        arrays["estimated_rewards"] = log.expected_reward
    if with_context:
        assert log.arrays.context is not None
        arrays["context"] = log.arrays.context
    np.savez(path, **arrays)
    return log


def test_writes_value_and_interval_per_estimator(tmp_path: Path) -> None:
    log = _write(tmp_path / "log.npz", with_model=True)
    out = tmp_path / "out.json"
    result = RUNNER.invoke(
        ROOT,
        [
            "ope",
            "arrays",
            str(tmp_path / "log.npz"),
            "--estimators",
            "ipw,snipw,dm,dr,sndr,switch-dr,dr-os",
            "--json",
            str(out),
            "--n-bootstrap",
            "200",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "switch-dr" in result.output and "effective sample size" in result.output
    document = json.loads(out.read_text())
    assert list(document["estimates"]) == ["ipw", "snipw", "dm", "dr", "sndr", "switch-dr", "dr-os"]
    for name, estimate in document["estimates"].items():
        assert set(estimate) == {"value", "ci_low", "ci_high"}
        assert estimate["ci_low"] <= estimate["value"] <= estimate["ci_high"], name
    assert document["reward_model"] == "given"
    arrays = {
        "action": log.arrays.action,
        "reward": log.arrays.reward,
        "pscore": log.arrays.pscore,
        "action_dist": log.arrays.action_dist,
        "estimated_rewards_by_reg_model": log.expected_reward,
    }
    assert document["estimates"]["dr"]["value"] == pytest.approx(
        ope.DoublyRobust().estimate_policy_value(**arrays), abs=1e-12
    )


def test_hyperparameters_come_from_flags(tmp_path: Path) -> None:
    log = _write(tmp_path / "log.npz", with_model=True, position=True)
    out = tmp_path / "out.json"
    result = RUNNER.invoke(
        ROOT,
        [
            "ope",
            "arrays",
            str(tmp_path / "log.npz"),
            "--estimators",
            "ipw,switch-dr,dr-os",
            "--clip",
            "2",
            "--switch-lambda",
            "3",
            "--dros-lambda",
            "10",
            "--ci",
            "normal",
            "--alpha",
            "0.1",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["ci_method"] == "normal" and document["alpha"] == 0.1 and document["len_list"] == 2
    arrays = {
        "action": log.arrays.action,
        "reward": log.arrays.reward,
        "pscore": log.arrays.pscore,
        "action_dist": log.arrays.action_dist,
        "position": log.arrays.position,
        "estimated_rewards_by_reg_model": log.expected_reward,
    }
    expected = {
        "ipw": ope.InverseProbabilityWeighting(lambda_=2.0),
        "switch-dr": ope.SwitchDoublyRobust(lambda_=3.0),
        "dr-os": ope.DoublyRobustWithShrinkage(lambda_=10.0),
    }
    for name, estimator in expected.items():
        assert document["estimates"][name]["value"] == pytest.approx(
            estimator.estimate_policy_value(**arrays), abs=1e-12
        )


@pytest.mark.parametrize("with_context", [False, True])
def test_cross_fits_a_reward_model_when_the_file_has_none(tmp_path: Path, with_context: bool) -> None:
    _write(tmp_path / "log.npz", with_model=False, with_context=with_context)
    out = tmp_path / "out.json"
    result = RUNNER.invoke(
        ROOT,
        ["ope", "arrays", str(tmp_path / "log.npz"), "--estimators", "dm,dr", "--ci", "normal", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["reward_model"].startswith("cross-fitted (2 folds)")
    assert ("no context" in document["reward_model"]) is not with_context


def test_bad_input_exits_1_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "log.npz"
    np.savez(
        path,
        action=np.zeros(3, dtype=int),
        reward=np.array([1.0, np.nan, 0.0]),
        pscore=np.full(3, 0.5),
        action_dist=np.full((3, 2, 1), 0.5),
    )
    result = RUNNER.invoke(ROOT, ["ope", "arrays", str(path), "--estimators", "ipw"])
    assert result.exit_code == 1
    assert "reward must be finite; got nan at rounds [1]" in result.output
    result = RUNNER.invoke(ROOT, ["ope", "arrays", str(path), "--estimators", "ipw,magic"])
    assert result.exit_code == 1 and "unknown estimator 'magic'" in result.output


@pytest.mark.parametrize(
    ("predictions", "message"),
    [
        (np.zeros((3, 3, 1)), "estimated_rewards must have action_dist's shape (3, 2, 1); got (3, 3, 1)"),
        (np.zeros((4, 2, 1)), "estimated_rewards has 4 rounds but action_dist has 3"),
        (np.full((3, 2, 1), np.nan), "estimated_rewards must be finite; got nan at rounds [0, 1, 2]"),
        (np.zeros((3, 2)), "estimated_rewards must be a 3-D array; got shape (3, 2)"),
    ],
)
def test_bad_reward_predictions_are_named_as_the_file_names_them(
    tmp_path: Path, predictions: np.ndarray, message: str
) -> None:
    # the file's array is "estimated_rewards"; obp's estimated_rewards_by_reg_model is a name the
    # user never wrote, and the error read as if about some other array
    path = tmp_path / "log.npz"
    arrays = {"action": np.zeros(3, dtype=int), "reward": np.ones(3), "pscore": np.full(3, 0.5)}
    np.savez(path, **arrays, action_dist=np.full((3, 2, 1), 0.5), estimated_rewards=predictions)
    result = RUNNER.invoke(ROOT, ["ope", "arrays", str(path), "--estimators", "dm"])
    assert result.exit_code == 1
    assert message in result.output and "estimated_rewards_by_reg_model" not in result.output
    with pytest.raises(ope.OPEInputError) as caught:
        ope.load_bandit_arrays(path)
    assert caught.value.field == "estimated_rewards"
    # a file that uses obp's own name is answered in that name
    np.savez(path, **arrays, action_dist=np.full((3, 2, 1), 0.5), estimated_rewards_by_reg_model=predictions)
    result = RUNNER.invoke(ROOT, ["ope", "arrays", str(path), "--estimators", "dm"])
    assert (
        result.exit_code == 1
        and message.replace("estimated_rewards", "estimated_rewards_by_reg_model") in result.output
    )


def test_a_file_that_is_not_npz_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "log.npz"
    path.write_text("not arrays")
    result = RUNNER.invoke(ROOT, ["ope", "arrays", str(path)])
    assert result.exit_code == 1 and "is not an .npz archive" in result.output


def test_a_single_npy_array_is_named_not_a_traceback(tmp_path: Path) -> None:
    # np.load reads a .npy as one bare array, which has no context manager: this was a TypeError
    path = tmp_path / "action.npy"
    np.save(path, np.zeros(3))
    with pytest.raises(ope.OPEInputError, match=r"is not an \.npz archive \(a single \.npy array\)"):
        ope.load_bandit_arrays(path)
    result = RUNNER.invoke(ROOT, ["ope", "arrays", str(path)])
    assert result.exit_code == 1 and "a single .npy array" in result.output


def test_a_text_file_is_not_blamed_on_pickling(tmp_path: Path) -> None:
    # np.load reads any non-zip, non-npy file as a pickle and refused it as "pickled (object) data"
    path = tmp_path / "log.npz"
    path.write_text("action,reward\n0,1\n")
    result = RUNNER.invoke(ROOT, ["ope", "arrays", str(path)])
    assert result.exit_code == 1
    assert "is not an .npz archive (not a zip archive)" in result.output
    assert "pickle" not in result.output
