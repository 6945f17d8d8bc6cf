"""memabra's estimates equal obp 0.5.7's, frozen in data/ by make_obp_reference.py, to 1e-9."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memabra.evals import ope

DATA = Path(__file__).resolve().parent / "data"
TOLERANCE = 1e-9

BANDIT_CLASSES: dict[str, type[ope.BanditEstimator]] = {
    "InverseProbabilityWeighting": ope.InverseProbabilityWeighting,
    "SelfNormalizedInverseProbabilityWeighting": ope.SelfNormalizedInverseProbabilityWeighting,
    "DirectMethod": ope.DirectMethod,
    "DoublyRobust": ope.DoublyRobust,
    "SelfNormalizedDoublyRobust": ope.SelfNormalizedDoublyRobust,
    "SwitchDoublyRobust": ope.SwitchDoublyRobust,
    "DoublyRobustWithShrinkage": ope.DoublyRobustWithShrinkage,
}
SLATE_CLASSES: dict[str, type[ope.SlateEstimator]] = {
    "SlateStandardIPS": ope.SlateStandardIPS,
    "SlateIndependentIPS": ope.SlateIndependentIPS,
    "SlateRewardInteractionIPS": ope.SlateRewardInteractionIPS,
}

_META = json.loads((DATA / "obp_reference.json").read_text())
_RECORDS: list[dict[str, Any]] = _META["records"]


def _arrays(set_name: str) -> dict[str, np.ndarray]:
    prefix = f"{set_name}__"
    with np.load(DATA / "obp_reference.npz") as stored:
        return {key[len(prefix) :]: stored[key] for key in stored.files if key.startswith(prefix)}


def _round_rewards(key: str) -> np.ndarray:
    with np.load(DATA / "obp_reference.npz") as stored:
        return stored[f"rr__{key}"]


def _bandit(record: dict[str, Any]) -> ope.BanditEstimator:
    return BANDIT_CLASSES[record["estimator"]](**record["params"])


def test_the_fixture_covers_every_estimator_with_and_without_position() -> None:
    assert _META["obp_version"] == "0.5.7"
    assert {r["estimator"] for r in _RECORDS} == set(BANDIT_CLASSES) | set(SLATE_CLASSES)
    assert "position" in _arrays("positions") and _arrays("positions")["action_dist"].shape[2] == 3


@pytest.mark.parametrize("record", [r for r in _RECORDS if r["kind"] == "bandit"], ids=lambda r: r["key"])
def test_bandit_estimate_equals_obp(record: dict[str, Any]) -> None:
    estimator = _bandit(record)
    arrays = _arrays(record["set"])
    assert abs(estimator.estimate_policy_value(**arrays) - record["value"]) <= TOLERANCE
    np.testing.assert_allclose(
        estimator.estimate_round_rewards(**arrays), _round_rewards(record["key"]), rtol=0, atol=TOLERANCE
    )


@pytest.mark.parametrize("record", [r for r in _RECORDS if r["kind"] == "bandit"], ids=lambda r: r["key"])
def test_streamed_estimate_equals_obp(record: dict[str, Any]) -> None:
    arrays = ope.BanditArrays(**_arrays(record["set"]))
    stream = ope.StreamingEstimate(_bandit(record))
    for batch in ope.iter_round_batches(arrays, batch_size=37):
        stream.update(batch)
    assert stream.n_rounds == arrays.n_rounds
    assert abs(stream.estimate_policy_value() - record["value"]) <= TOLERANCE


@pytest.mark.parametrize("record", [r for r in _RECORDS if r["kind"] == "slate"], ids=lambda r: r["key"])
def test_slate_estimate_equals_obp(record: dict[str, Any]) -> None:
    estimator = SLATE_CLASSES[record["estimator"]]()
    assert abs(estimator.estimate_policy_value(**_arrays(record["set"])) - record["value"]) <= TOLERANCE
