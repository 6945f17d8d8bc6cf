"""Importance-weight diagnostics."""

from __future__ import annotations

import numpy as np
import pytest

from memabra.evals import ope


def test_diagnostics_from_weights() -> None:
    diagnostics = ope.ImportanceWeightDiagnostics.from_weights(np.array([0.0, 1.0, 1.0, 2.0]))
    assert diagnostics.n_rounds == 4
    assert diagnostics.effective_sample_size == pytest.approx(16 / 6)
    assert diagnostics.max_weight == 2.0
    assert diagnostics.mean_weight == 1.0
    assert diagnostics.zero_weight_share == 0.25


def test_equal_weights_give_the_full_sample_size_and_zero_weights_give_none() -> None:
    assert ope.ImportanceWeightDiagnostics.from_weights(np.full(10, 0.7)).effective_sample_size == pytest.approx(10)
    assert ope.ImportanceWeightDiagnostics.from_weights(np.zeros(10)).effective_sample_size == 0.0


def test_report_diagnostics_match_the_logged_weights() -> None:
    log = ope.SyntheticBandit().sample(800, random_state=0)
    report = ope.evaluate_bandit_arrays(log.arrays, ope.make_estimators(["ipw"]), method="normal")
    weights = log.arrays.round_batch().importance_weight()
    assert weights is not None and report.diagnostics is not None
    assert report.diagnostics.max_weight == pytest.approx(weights.max())
    assert report.diagnostics.effective_sample_size == pytest.approx(weights.sum() ** 2 / (weights**2).sum())
    assert report.reward_model == "not needed"


def test_the_largest_of_signed_weights_is_read_not_zero() -> None:
    # the pseudo-inverse weight sum_s rho_s - L + 1 is negative wherever the target avoids the
    # logged draws; the tally started its maximum at 0 and read 0 for an all-negative stream
    weights = np.array([-2.0, -0.5, -1.0])
    assert ope.ImportanceWeightDiagnostics.from_weights(weights).max_weight == -0.5
