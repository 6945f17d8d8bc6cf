"""PI-DR, IIPS and IDR lean on the same per-draw ratios as PI: where cascade DR minus one of them on
the same decisions shows it biased, or (IIPS and IDR) the model's slot gains summed on the logged
prefixes miss the direct method, its row under ``estimates`` is unsupported, and it stands where the
log shows nothing against it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

import logged_world
from logged_world import Stopper, additive_reward_of, log_world
from memabra import Budget, CandidateKind
from memabra.evals.offline import Target, evaluate_policies
from memabra.evals.offline._recommend import sequential_bias_verdict
from memabra.evals.offline._slate_model import SlateRewardModel
from memabra.evals.offline._support import SupportVerdict
from memabra.evals.ope import IntervalMethod, PolicyValueInterval
from memabra.storage import EpisodeLog, upgrade

pytestmark = pytest.mark.slow

CHECKED = ("pi-dr", "iips", "idr")
LABELS = {"pi-dr": "PI-DR", "iips": "IIPS", "idr": "IDR"}


def test_iips_and_idr_are_refused_where_cascade_dr_shows_them_biased(additive_log: EpisodeLog) -> None:
    # a target that stops at 0.8 (exact value +0.0092, every path of the slot loop summed): IIPS read
    # +0.0141 [+0.0121, +0.0160] and IDR +0.0130 [+0.0128, +0.0133], both "supported", against cascade
    # DR's +0.0092 [+0.0091, +0.0093]; the logger itself (stop 0.3), every ratio 1, leaves nothing out
    biased, logger, eager = evaluate_policies(
        additive_log,
        [Target("stop 0.8", Stopper(0.8)), Target("stop 0.3", Stopper(0.3)), Target("stop 0.05", Stopper(0.05))],
        seed=0,
    )
    cdr = biased.estimates["cdr"]
    assert biased.recommended.estimator == "cdr" and biased.recommended.supported
    for name in ("iips", "idr"):
        assert biased.estimates[name].ci_low > cdr.ci_high
        verdict = biased.verdicts[name]
        assert not verdict.supported and verdict.rule == "sequential draws"
        gap = biased.gaps[name]
        assert gap.ci_high < 0.0
        assert f"cascade DR minus {LABELS[name]} on the same decisions is {gap.value:+.3g}" in verdict.reason
        assert f"{LABELS[name]} is biased on this log" in verdict.reason
        shown = biased.as_json()["diagnostics"][f"cdr_minus_{name}"]
        assert shown["ci_high"] < 0.0 and shown["difference"] == pytest.approx(gap.value)
    stored = {r.estimator: r.details for r in biased.results}
    assert stored["iips"]["estimator_supported"] is False
    assert "cascade DR minus IIPS" in stored["iips"]["estimator_reason"]
    # on the logger's own policy every estimator is unbiased: the gaps hold 0 and the rows stand
    diagnostics = logger.as_json()["diagnostics"]
    for name in CHECKED:
        key = f"cdr_minus_{name.replace('-', '_')}"
        assert diagnostics[key]["ci_low"] <= 0.0 <= diagnostics[key]["ci_high"]
        assert logger.verdicts[name].supported
    assert diagnostics["slot_sum_minus_dm"]["ci_low"] <= 0.0 <= diagnostics["slot_sum_minus_dm"]["ci_high"]
    # the pi family's existing gap keeps its name and shape
    assert set(diagnostics["cdr_minus_pi"]) == {"difference", "ci_low", "ci_high"}
    # a target that stops at 0.05 (exact +0.0710): cascade DR minus IIPS, +0.004 [-0.006, +0.015], is
    # too wide to show IIPS's bias, but the model's slot gains summed on the logged prefixes miss its
    # value of the target's own selections by -0.010 [-0.014, -0.006] (IIPS read -0.004 to -0.017
    # off the truth on logger seeds 1-4, its interval missing on two)
    gap, slot = eager.gaps["iips"], eager.slot_gap
    assert not eager.verdicts["iips"].supported and eager.verdicts["iips"].rule == "slot independence"
    assert gap.ci_low <= 0.0 <= gap.ci_high
    assert slot is not None and slot.ci_high < 0.0
    assert "slot gains summed on the logged prefixes" in eager.verdicts["iips"].reason
    assert eager.as_json()["diagnostics"]["slot_sum_minus_dm"]["ci_high"] < 0.0


def test_one_draw_per_decision_leaves_nothing_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # with one slot each decision is one draw: P = W = rho_1, IIPS is IPS on the model's residual,
    # IDR is cascade DR and PI-DR is DR, all unbiased for any covered target; the test must not
    # refuse them (a target that stops at 0.8 against the logger's 0.3)
    monkeypatch.setattr(logged_world, "BUDGET", Budget(max_tokens=100, slots={CandidateKind.MEMORY: 1}))
    url = f"sqlite:///{tmp_path / 'one.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        log_world(log, Stopper(0.3, seed=1), 1500, reward=additive_reward_of, with_used=True)
        (ev,) = evaluate_policies(log, [Target("stop 0.8", Stopper(0.8))], seed=0)
    assert ev.recommended.supported
    for name in CHECKED:
        assert ev.gaps[name].ci_low <= 0.0 <= ev.gaps[name].ci_high
        assert ev.verdicts[name].supported, ev.verdicts[name].reason
    assert ev.gaps["idr"].value == pytest.approx(0.0, abs=1e-12)  # IDR is cascade DR on one draw
    # q_0 + Q_1 is the model's value of the target's one draw: the slot sum misses nothing
    assert ev.slot_gap is not None and ev.slot_gap.ci_low <= 0.0 <= ev.slot_gap.ci_high


def test_pi_dr_is_refused_where_its_model_adds_nothing(
    additive_log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a reward model that has learned nothing (predicting 0 everywhere) leaves PI-DR as PI: biased
    # by the sequential draws for a target that stops at 0.95 (PI -0.011 [-0.020, -0.001] against
    # an exact +0.0020); cascade DR, on the same model, is the joint-weight estimator, unbiased
    def nothing(self: SlateRewardModel, fold: int, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.zeros(len(rows))

    monkeypatch.setattr(SlateRewardModel, "predict_fold", nothing)
    (ev,) = evaluate_policies(additive_log, [Target("stop 0.95", Stopper(0.95))], seed=0)
    assert ev.estimates["pi-dr"].value == pytest.approx(ev.estimates["pi"].value)
    verdict = ev.verdicts["pi-dr"]
    assert not verdict.supported and verdict.rule == "sequential draws"
    assert ev.gaps["pi-dr"].ci_low > 0.0
    assert "cascade DR minus PI-DR on the same decisions" in verdict.reason
    assert ev.as_json()["diagnostics"]["cdr_minus_pi_dr"]["ci_low"] > 0.0


def _gap(low: float, high: float) -> PolicyValueInterval:
    return PolicyValueInterval((low + high) / 2, low, high, 0.05, IntervalMethod.NORMAL)


def test_the_reason_names_the_gap_and_the_assumption() -> None:
    for name in CHECKED:
        refused = sequential_bias_verdict(_gap(-0.03, -0.01), SupportVerdict(True, ""), name)
        assert refused is not None and refused.rule == "sequential draws"
        assert f"cascade DR minus {LABELS[name]} on the same decisions is -0.02 [-0.03, -0.01]" in refused.reason
        assert sequential_bias_verdict(_gap(-0.03, 0.01), SupportVerdict(True, ""), name) is None
        assert sequential_bias_verdict(_gap(-0.03, -0.01), SupportVerdict(False, "", "mean weight"), name) is None


def test_the_slot_sum_needs_no_reference_weight() -> None:
    from memabra.evals.offline._bias import bias_verdicts, slot_sum_verdict

    # cascade DR's weight not covering the target leaves no reference for the gap, but the slot sum
    # weights nothing: IIPS and IDR are refused on it, PI-DR (no slot sum) and PI are not
    uncovered = SupportVerdict(False, "mean joint weight 0.4 [0.1, 0.7] excludes 1", "mean weight")
    passed = {name: SupportVerdict(True, "") for name in ("pi", "pi-dr", "iips", "idr", "cdr")}
    verdicts = bias_verdicts(passed, uncovered, {name: _gap(-0.5, -0.1) for name in CHECKED}, _gap(-0.3, -0.2))
    assert [name for name, v in verdicts.items() if not v.supported] == ["iips", "idr"]
    assert {verdicts[name].rule for name in ("iips", "idr")} == {"slot independence"}
    assert slot_sum_verdict(_gap(-0.3, 0.1), "iips") is None
    assert slot_sum_verdict(_gap(-0.3, -0.2), "pi-dr") is None
