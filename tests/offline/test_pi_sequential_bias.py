"""PI assumes draws independent across slots, and memabra's never are: where cascade DR minus PI on
the same decisions shows PI biased, PI is not supported, and never the recommended fallback."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from logged_world import Stopper
from memabra.evals.offline import Target, evaluate_policies
from memabra.evals.offline import _support as support
from memabra.evals.offline._recommend import sequential_bias_verdict
from memabra.evals.offline._support import SupportVerdict
from memabra.evals.ope import IntervalMethod, PolicyValueInterval
from memabra.router import Router, SlotView
from memabra.storage import EpisodeLog

pytestmark = pytest.mark.slow


class Focus(Router):
    """Goes on past the first draw, mostly with the first eligible candidate, then mostly stops."""

    name = "focus"

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        if view.n_options == 1:
            return np.ones(1)
        stop = 0.05 if view.position == 0 else 0.9
        out = np.full(view.n_options, (1.0 - stop) * 0.1 / (view.n_options - 1))
        out[0] += (1.0 - stop) * 0.9
        out[-1] = stop
        return out / out.sum()


def test_pi_is_refused_where_cascade_dr_shows_it_biased(additive_log: EpisodeLog) -> None:
    # the reward adds up and every option is covered, but a target that stops at 0.95 changes which
    # later draws the logger makes: PI read -0.011 [-0.020, -0.001], "supported", against a truth of
    # +0.0020 (exact: every path of the slot loop summed) and cascade DR's +0.0020 [+0.0020, +0.0020]
    heavy, light = evaluate_policies(
        additive_log, [Target("stop 0.95", Stopper(0.95)), Target("stop 0.05", Stopper(0.05))], seed=0
    )
    assert heavy.additivity is not None and heavy.additivity.additive
    assert heavy.pi_gap is not None and heavy.pi_gap.ci_low > 0.0
    for name in ("pi", "snpi"):
        assert not heavy.verdicts[name].supported
        assert heavy.verdicts[name].rule == "sequential draws"
        assert "cascade DR minus PI" in heavy.verdicts[name].reason
    assert heavy.estimates["pi"].ci_high < heavy.estimates["cdr"].value
    assert heavy.recommended.estimator == "cdr" and heavy.recommended.supported
    gap = heavy.as_json()["diagnostics"]["cdr_minus_pi"]
    assert gap["ci_low"] > 0.0 and gap["difference"] == pytest.approx(heavy.pi_gap.value)
    # where PI's bias is below what the log can show (+0.072 against a truth of +0.071), it stands
    assert light.pi_gap is not None and light.pi_gap.ci_low <= 0.0 <= light.pi_gap.ci_high
    assert light.verdicts["pi"].supported


def test_a_biased_pi_is_not_the_fallback_where_cascade_dr_runs_short(
    additive_log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the focused target's joint weight keeps 90 effective decisions of 1,500, its pseudo-inverse
    # weight 196: a threshold between them stands for a shorter log, where cascade DR runs out of
    # effective samples first and PI (+0.064 against a truth of +0.041) used to be recommended
    monkeypatch.setattr(support, "MIN_EFFECTIVE_SAMPLE_SIZE", 120.0)
    (ev,) = evaluate_policies(additive_log, [Target("focus", Focus())], seed=0)
    assert ev.verdicts["cdr"].rule == "effective sample size"
    assert ev.verdicts["pi"].rule == "sequential draws"
    rec = ev.recommended
    assert rec.estimator == "cdr" and not rec.supported
    assert "; pi: cascade DR minus PI on the same decisions" in rec.reason
    assert rec.ci_low <= ev.estimates["cdr"].ci_low and rec.ci_high >= ev.estimates["cdr"].ci_high


def _gap(low: float, high: float) -> PolicyValueInterval:
    return PolicyValueInterval((low + high) / 2, low, high, 0.05, IntervalMethod.NORMAL)


def test_the_gap_judges_pi_only_where_cascade_dr_is_a_reference() -> None:
    short = SupportVerdict(False, "effective sample size 12 is below 20", "effective sample size")
    refused = sequential_bias_verdict(_gap(0.01, 0.03), short)
    assert refused is not None and refused.rule == "sequential draws" and "+0.02 [+0.01, +0.03]" in refused.reason
    assert sequential_bias_verdict(_gap(-0.03, -0.01), SupportVerdict(True, "")) is not None
    # a gap that holds 0 shows nothing; an uncovered joint weight (or its floor) leaves no reference
    assert sequential_bias_verdict(_gap(-0.01, 0.03), SupportVerdict(True, "")) is None
    for rule in ("mean weight", "floor", "over-drawn"):
        assert sequential_bias_verdict(_gap(0.01, 0.03), SupportVerdict(False, "", rule)) is None
    assert sequential_bias_verdict(_gap(-np.inf, np.inf), SupportVerdict(True, "")) is None
