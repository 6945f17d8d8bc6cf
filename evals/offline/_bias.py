"""Where the log shows an estimator that leans on per-draw ratios biased by memabra's sequential draws
(``docs/ope.md``, "Sequential draws"): two paired tests on the same decisions, each refusing a
verdict that passed, never supporting one.

PI and PI-DR weight the reward (the model's residual) by ``P = 1 + sum_s (rho_s - 1)``, IIPS and IDR
each slot's term by its own ``rho_s``, where the cascade needs the products ``W_1:s``. The terms
they leave out have mean 0 only when the draws are independent across slots and each slot's share of
the reward depends on its own draw, which memabra's draws never are (a pick is not offered again; the
stop option ends the kind).

1. Cascade DR minus the estimator (:func:`sequential_bias_verdict`): cascade DR is unbiased under
   support whatever the reward, so the gap estimates the estimator's whole bias wherever cascade
   DR's joint weight reaches the target. Its interval is as wide as the joint weight makes it.
2. For IIPS and IDR, the slot sum minus the direct method (:func:`slot_sum_verdict`), with no
   weight at all. IIPS's terms for s < L are the reward model's increments ``q(S_s) - q(S_s-1)``,
   whose mean under the target's draw s on the logged prefix is ``Q_s`` exactly; so (per-draw
   support) ``E_b[IIPS] = E_b[IDR] = E_b[q_0 + sum_s Q_s] + E_b[rho_L (R - q(S_L))]``, while the
   target's value is ``E[q_e] + E_target[R - q(S_L)]``. ``q_0 + sum_s Q_s - q_e`` on the same
   decisions therefore estimates the model's part of their bias, exactly whatever the model's own
   error: how far the model's per-slot gains, summed on the logger's prefixes, miss its value of the
   target's own selections. Where the joint weight has too few effective samples for (1) to show
   anything (a greedy target on the simulator), this part still shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from memabra.evals.offline._evaluation_records import GAP_NAMES
from memabra.evals.offline._support import SupportVerdict
from memabra.evals.ope import PolicyValueInterval

__all__ = [
    "BIAS_GAPS",
    "GAP_ESTIMATORS",
    "SEQUENTIAL_BIAS",
    "SLOT_SUM_CHECKED",
    "bias_verdicts",
    "sequential_bias_verdict",
    "slot_sum_verdict",
]

# each estimator cascade DR minus it judges, by the gap of the plain-mean estimator named (snpi, a
# ratio of means, by PI's)
BIAS_GAPS: Mapping[str, str] = {"pi": "pi", "snpi": "pi", "pi-dr": "pi-dr", "iips": "iips", "idr": "idr"}
SEQUENTIAL_BIAS = frozenset(BIAS_GAPS)
GAP_ESTIMATORS: tuple[str, ...] = GAP_NAMES
# the estimators whose slot terms sum the model's per-slot gains on the logged prefixes
SLOT_SUM_CHECKED = frozenset({"iips", "idr"})
# each estimator as the reasons name it, and the assumption the tests show failing
_ASSUMES = {
    "pi": ("PI", "draws independent across slots and a reward that adds up over them"),
    "pi-dr": ("PI-DR", "draws independent across slots and a reward model's residual that adds up over them"),
    "iips": ("IIPS", "that each slot's share of the reward depends on its own draw only, not on the draws before it"),
    "idr": ("IDR", "that each slot's modelled gain depends on its own draw only, and the residual on the last one"),
}


def _excludes_zero(gap: PolicyValueInterval) -> bool:
    return math.isfinite(gap.ci_low) and math.isfinite(gap.ci_high) and not gap.ci_low <= 0.0 <= gap.ci_high


def _interval(gap: PolicyValueInterval) -> str:
    return f"{gap.value:+.3g} [{gap.ci_low:+.3g}, {gap.ci_high:+.3g}]"


def sequential_bias_verdict(
    gap: PolicyValueInterval, joint: SupportVerdict, estimator: str = "pi"
) -> SupportVerdict | None:
    """Unsupported when cascade DR minus ``estimator`` (one of :data:`GAP_ESTIMATORS`) on the same
    decisions shows it biased, else ``None`` (the log does not say).

    PI's ``P`` is the first-order expansion of the joint weight ``W = prod_s (1 + (rho_s - 1))``, so
    ``E_b[P R] = V(pi_e) - E_b[(W - P) R]`` under support; PI-DR, IIPS and IDR likewise leave out
    the higher-order terms of their cascade twins. ``gap`` estimates the estimator's bias wherever
    ``joint``, cascade DR's own verdict, fails at most for want of effective samples (its weight
    reaches the target), whichever assumption fails. A gap whose interval excludes 0 is a bias the
    log shows; a gap holding 0 proves nothing, and a joint weight the log does not cover gives no
    reference."""
    if not (joint.supported or joint.rule == "effective sample size") or not _excludes_zero(gap):
        return None
    label, assumes = _ASSUMES[estimator]
    return SupportVerdict(
        False,
        f"cascade DR minus {label} on the same decisions is {_interval(gap)}, which excludes 0: {label} is "
        f"biased on this log (it assumes {assumes}; memabra's draws are sequential)",
        "sequential draws",
    )


def slot_sum_verdict(gap: PolicyValueInterval, estimator: str) -> SupportVerdict | None:
    """Unsupported when ``q_0 + sum_s Q_s`` minus the direct method's ``q_e`` on the same decisions
    (``gap``) excludes 0 for ``estimator`` (IIPS or IDR), else ``None``: the model's part of its
    bias, which needs no weight (module docstring). A gap holding 0 proves nothing: the residual's
    part is left to :func:`sequential_bias_verdict`."""
    if estimator not in SLOT_SUM_CHECKED or not _excludes_zero(gap):
        return None
    label, assumes = _ASSUMES[estimator]
    return SupportVerdict(
        False,
        f"the reward model's slot gains summed on the logged prefixes minus its value of the target's own "
        f"selections (DM) on the same decisions is {_interval(gap)}, which excludes 0: {label} is biased by as "
        f"much under the model (it assumes {assumes}; memabra's draws are sequential)",
        "slot independence",
    )


def bias_verdicts(
    verdicts: Mapping[str, SupportVerdict],
    joint: SupportVerdict,
    gaps: Mapping[str, PolicyValueInterval],
    slot_gap: PolicyValueInterval | None,
) -> dict[str, SupportVerdict]:
    """``verdicts`` with each supported one of :data:`SEQUENTIAL_BIAS` refused where cascade DR minus
    it (``gaps``, by estimator) shows it biased, and each of :data:`SLOT_SUM_CHECKED` where the slot
    sum minus DM (``slot_gap``) does."""
    out = dict(verdicts)
    for name, verdict in verdicts.items():
        if not verdict.supported:
            continue
        gap = gaps.get(BIAS_GAPS.get(name, ""))
        shown = None if gap is None else sequential_bias_verdict(gap, joint, BIAS_GAPS[name])
        if shown is None and slot_gap is not None:
            shown = slot_sum_verdict(slot_gap, name)
        if shown is not None:
            out[name] = shown
    return out
