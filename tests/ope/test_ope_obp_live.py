"""Live cross-check against obp 0.5.7; runs only where obp is importable (a throwaway venv, see
make_obp_reference.py). The frozen fixture in test_ope_obp_reference.py covers the normal suite."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from memabra.evals import ope

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # obp and its pinned stack warn on import under new numpy/pandas
    obp_ope = pytest.importorskip("obp.ope", reason="obp is not installed; the frozen fixture covers parity")


def _reference_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_obp_reference", Path(__file__).with_name("make_obp_reference.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _reference_module()
BANDIT_CLASSES = {
    "InverseProbabilityWeighting": ope.InverseProbabilityWeighting,
    "SelfNormalizedInverseProbabilityWeighting": ope.SelfNormalizedInverseProbabilityWeighting,
    "DirectMethod": ope.DirectMethod,
    "DoublyRobust": ope.DoublyRobust,
    "SelfNormalizedDoublyRobust": ope.SelfNormalizedDoublyRobust,
    "SwitchDoublyRobust": ope.SwitchDoublyRobust,
    "DoublyRobustWithShrinkage": ope.DoublyRobustWithShrinkage,
}


def _synthetic_sets() -> dict[str, dict[str, np.ndarray]]:
    sets = REFERENCE.bandit_sets()
    for len_list in (1, 3):
        log = ope.SyntheticBandit(n_actions=8, len_list=len_list, random_state=len_list).sample(5000, random_state=9)
        arrays = {
            "action": log.arrays.action,
            "reward": log.arrays.reward,
            "pscore": log.arrays.pscore,
            "action_dist": log.arrays.action_dist,
            "estimated_rewards_by_reg_model": log.expected_reward + 0.05,
        }
        if log.arrays.position is not None:
            arrays["position"] = log.arrays.position
        sets[f"synthetic{len_list}"] = arrays
    return sets


@pytest.mark.parametrize("set_name", ["single", "positions", "deterministic", "synthetic1", "synthetic3"])
def test_bandit_estimators_match_obp_live(set_name: str) -> None:
    arrays = _synthetic_sets()[set_name]
    for class_name, params in REFERENCE.bandit_configs(set_name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = getattr(obp_ope, class_name)(**params).estimate_policy_value(**arrays)
        actual = BANDIT_CLASSES[class_name](**params).estimate_policy_value(**arrays)
        assert abs(actual - expected) <= 1e-9, (class_name, params)


def test_slate_estimators_match_obp_live() -> None:
    sets = {**REFERENCE.slate_sets(), "synthetic": _slate_arrays()}
    classes = {
        "SlateStandardIPS": ope.SlateStandardIPS,
        "SlateIndependentIPS": ope.SlateIndependentIPS,
        "SlateRewardInteractionIPS": ope.SlateRewardInteractionIPS,
    }
    for arrays in sets.values():
        len_list = int(arrays["position"].max()) + 1
        for class_name, ours in classes.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = getattr(obp_ope, class_name)(len_list=len_list).estimate_policy_value(**arrays)
            assert abs(ours().estimate_policy_value(**arrays) - expected) <= 1e-9, class_name


def _slate_arrays() -> dict[str, np.ndarray]:
    batch = ope.SyntheticSlateBandit().sample(500, random_state=3)
    return {name: getattr(batch, name) for name in ope.SlateBatch.__dataclass_fields__}
