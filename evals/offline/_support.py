"""Support diagnostics of a target policy on the log, and the verdict they lead to.

For each target and each importance weight (joint W, pseudo-inverse P, per-slot mean of rho) the
diagnostics keep the effective sample size (sum w)^2 / sum w^2, the mean weight with its normal
interval, the largest weight and the share of zero weights. Whatever the target, E_b[W] = E_b[P] =
1 when the logger gives every option the target uses a positive probability, so a mean weight whose
interval excludes 1 says the log does not support the target (or holds wrong propensities). The
per-slot mean of a decision's ratios is descriptive only and judges no estimator: each draw's
E[rho_s | prefix] is 1, but how many draws a decision makes depends on them, so their per-decision
mean is not 1 in expectation (1.24 for a covered target that stops more often than its logger);
iips and idr are judged on P, whose mean is 1 exactly under that per-draw support. The floor share
is the part of the target's probability, averaged over the logged draws, that falls on options
where the logger put only its floor: the slot's smallest probability
when the slot's distribution is not uniform and that smallest probability is below
:data:`FLOOR_CEILING`, or anything below :data:`SUPPORT_PROBABILITY`. What the
logger gave only its floor it almost never tried, so the estimate there rests on a handful of draws.

A target is ``unsupported`` when any of:

1. its floor share exceeds :data:`MAX_FLOOR_SHARE`;
2. the mean of the recommended estimator's weight has a ``1 - alpha`` interval that excludes 1
   by more than :data:`MEAN_WEIGHT_TOLERANCE`;
3. that weight's effective sample size is below :data:`MIN_EFFECTIVE_SAMPLE_SIZE`;
4. another replay of the same draws shows them over-drawn (:func:`overdrawn_verdict`).

An unsupported target's interval is widened to what the log can still say (:func:`unreached_bounds`):
a share ``m`` of the target's probability the log did not reach could have earned anything in the
logged reward range ``[r_min, r_max]``, so the value lies in
``[ci_low - m (r_max - r_min), ci_high + m (r_max - r_min)]`` clipped to that range (worst-case
bounds in Manski's sense), with ``m = max(floor share, 1 - mean weight's ci_low, mean weight's
ci_high - 1)`` clipped to ``[0, 1]``: ``E_b[W] = 1 - m`` for the mass the logger never gives a
draw, and a weight whose interval strays from 1 says by how much the sample missed (or
over-drew) the target's tail. A narrow interval around an unsupported estimate would read as
knowledge the log does not hold.

A supported target's interval is widened the same way by the share the log shows missing
(:func:`missing_share`): rule 2 tolerates a mean weight whose interval falls short of 1 by less
than the tolerance, and such a sample has still not reached ``m = 1 - mean weight`` of the
target's probability, which biases the estimate by up to ``m (r_max - r_min)`` (1.3% unreached
on the reviewer's ``tools_multiple`` log: a bias of 0.018 against a half-width of 0.013). Where
the interval holds 1 the log shows no shortfall, only noise, and nothing is widened: a
heavy-tailed weight's sample mean sits below 1 by chance most of the time (0.76 [0.49, 1.04] for
bm25 on the ``memory_customer`` check log), and widening by that would turn a covering interval
into a third of the reward's range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "FLOOR_CEILING",
    "MAX_FLOOR_SHARE",
    "MEAN_WEIGHT_TOLERANCE",
    "MIN_EFFECTIVE_SAMPLE_SIZE",
    "SUPPORT_PROBABILITY",
    "SupportVerdict",
    "WeightDiagnostics",
    "WeightSummary",
    "floor_verdict",
    "missing_share",
    "overdrawn_verdict",
    "support_verdict",
    "unreached_bounds",
    "unreached_share",
]

# a fifth of the target's choices resting on options the logger hardly ever tried is too much to
# extrapolate: the estimate would be mostly the reward model's (or a few huge weights')
MAX_FLOOR_SHARE = 0.2
# fewer effective decisions than this and a normal interval is not to be trusted
MIN_EFFECTIVE_SAMPLE_SIZE = 20.0
# how far the mean weight's interval may miss 1 before the target is unsupported: a greedy logger's
# floors make the sample mean 1 + (floor mass), about 1e-5 per option, and 0.02 let a bm25 estimate
# with 2.4% unreached through, 0.023 off its truth. What a supported target's sample still missed
# is not left to this tolerance: its interval is widened by it (missing_share)
MEAN_WEIGHT_TOLERANCE = 0.005
# a logged probability below this is a floor whatever the slot looks like: weights above 1000
SUPPORT_PROBABILITY = 1e-3
# a slot's smallest probability is its floor only below this: an option drawn in 1 of 100 draws or
# more is explored (a log of thousands of decisions draws it dozens of times), not floored
FLOOR_CEILING = 1e-2


@dataclass(slots=True)
class WeightSummary:
    """Streaming count, sum, sum of squares, maximum and zeros of one importance weight."""

    _count: int = field(default=0, init=False)
    _total: float = field(default=0.0, init=False)
    _squares: float = field(default=0.0, init=False)
    _max: float = field(default=-math.inf, init=False)
    _zeros: int = field(default=0, init=False)

    def update(self, weights: NDArray[np.float64]) -> None:
        if weights.size == 0:
            return
        self._count += int(weights.size)
        self._total += float(weights.sum())
        self._squares += float(weights @ weights)
        self._max = max(self._max, float(weights.max()))
        self._zeros += int(np.count_nonzero(weights == 0.0))

    @property
    def count(self) -> int:
        return self._count

    @property
    def mean(self) -> float:
        return self._total / self._count if self._count else math.nan

    @property
    def effective_sample_size(self) -> float:
        return self._total**2 / self._squares if self._squares > 0 else 0.0

    def mean_interval(self, alpha: float) -> tuple[float, float]:
        if self._count < 2:
            return -math.inf, math.inf
        variance = max(self._squares - self._count * self.mean**2, 0.0) / (self._count - 1)
        half = NormalDist().inv_cdf(1 - alpha / 2) * math.sqrt(variance / self._count)
        return self.mean - half, self.mean + half

    def diagnostics(self, alpha: float) -> WeightDiagnostics:
        low, high = self.mean_interval(alpha)
        return WeightDiagnostics(
            effective_sample_size=self.effective_sample_size,
            mean_weight=self.mean,
            mean_weight_ci_low=low,
            mean_weight_ci_high=high,
            max_weight=self._max if self._count else math.nan,
            zero_weight_share=self._zeros / self._count if self._count else math.nan,
        )


@dataclass(frozen=True, slots=True)
class WeightDiagnostics:
    """One importance weight ``w`` of a target on the log's decisions.

    - ``effective_sample_size`` = (sum w)^2 / sum w^2: how many decisions the estimate rests on.
    - ``mean_weight`` with its normal ``1 - alpha`` interval ``[mean_weight_ci_low,
      mean_weight_ci_high]``: E_b[w] = 1 where the log supports the target; infinite bounds from
      fewer than 2 decisions.
    - ``max_weight``, ``zero_weight_share``: the largest weight; the share of decisions the target
      never takes. NaN where no decision was weighted.
    """

    effective_sample_size: float
    mean_weight: float
    mean_weight_ci_low: float
    mean_weight_ci_high: float
    max_weight: float
    zero_weight_share: float

    def as_dict(self) -> dict[str, float]:
        """The figures by name, as ``memabra ope log --json`` and the stored results hold them."""
        return {
            "effective_sample_size": self.effective_sample_size,
            "mean_weight": self.mean_weight,
            "mean_weight_ci_low": self.mean_weight_ci_low,
            "mean_weight_ci_high": self.mean_weight_ci_high,
            "max_weight": self.max_weight,
            "zero_weight_share": self.zero_weight_share,
        }


@dataclass(frozen=True, slots=True)
class SupportVerdict:
    supported: bool
    reason: str
    # the rule that failed ("floor", "mean weight", "effective sample size"; the evaluation adds
    # "undefined" and "additivity"), so two estimators' verdicts can be told apart by rule
    rule: str = ""


def floor_verdict(floor_share: float) -> SupportVerdict:
    """Rule 1 alone: all an estimate that weights nothing (the direct method) can fail, since its
    reward model extrapolates to where the logger hardly went."""
    if floor_share > MAX_FLOOR_SHARE:
        return SupportVerdict(
            False,
            f"{floor_share:.0%} of the target's probability falls where the logger put only its floor "
            f"(more than {MAX_FLOOR_SHARE:.0%})",
            "floor",
        )
    return SupportVerdict(True, "")


def support_verdict(weight: WeightSummary, floor_share: float, alpha: float, weight_label: str) -> SupportVerdict:
    """The rules of the module docstring, first failing rule first; the reason says why in numbers."""
    floor = floor_verdict(floor_share)
    if not floor.supported:
        return floor
    low, high = weight.mean_interval(alpha)
    size = weight.effective_sample_size
    # the effective sample size grows in proportion to the decisions logged by the same logger, so
    # how far short it falls is what a user can act on
    growth = (
        f"about {_times(MIN_EFFECTIVE_SAMPLE_SIZE / size)} as many decisions logged the same way would reach "
        f"{MIN_EFFECTIVE_SAMPLE_SIZE:g}"
        if size > 0.0
        else "no logged decision reached the target"
    )
    if high < 1.0 - MEAN_WEIGHT_TOLERANCE or low > 1.0 + MEAN_WEIGHT_TOLERANCE:
        # on few effective samples a mean weight short of 1 is what a rarely drawn tail of large
        # weights looks like, not only a target outside the logger's support
        short = (
            f"; its effective sample size {size:.1f} is below {MIN_EFFECTIVE_SAMPLE_SIZE:g} too, so a tail of large "
            f"weights the log drew too rarely may read the same ({growth})"
            if 0.0 < size < MIN_EFFECTIVE_SAMPLE_SIZE
            else ""
        )
        return SupportVerdict(
            False,
            f"mean {weight_label} weight {weight.mean:.3g} [{low:.3g}, {high:.3g}] excludes 1: the log does not "
            f"cover this target (or its propensities are wrong){short}",
            "mean weight",
        )
    if size < MIN_EFFECTIVE_SAMPLE_SIZE:
        return SupportVerdict(
            False,
            f"effective sample size {size:.1f} is below {MIN_EFFECTIVE_SAMPLE_SIZE:g}; {growth}",
            "effective sample size",
        )
    return SupportVerdict(True, "")


def overdrawn_verdict(weight: WeightSummary, alpha: float, weight_label: str, replay: str) -> SupportVerdict | None:
    """Unsupported when another replay of the same draws shows them over-drawn (its mean weight's
    interval above 1), else ``None``.

    A tail the log never drew pulls a mean weight below 1, and another replay may weight the same
    draws without that tail; nothing unseen pushes it above 1. A mean weight above 1 says the
    draws that reach the target came more often than their logged probabilities give (a run of
    luck, or wrong propensities), so any estimate built from them over-counts them, whichever
    replay weights them."""
    low, high = weight.mean_interval(alpha)
    if not low > 1.0 + MEAN_WEIGHT_TOLERANCE:
        return None
    return SupportVerdict(
        False,
        f"the {replay.replace(' ', '-')} replay's mean {weight_label} weight {weight.mean:.3g} [{low:.3g}, {high:.3g}] is above 1: "
        "the log drew the target's selections more often than their logged probabilities give (a chance run, "
        "or wrong propensities), so no replay of these draws is trusted",
        "over-drawn",
    )


def _times(ratio: float) -> str:
    """A growth factor rounded up (to a tenth below 10, else to two significant figures): 19.6
    effective samples need 1.1x, not "1x"; a large one reads 920x or 500,000x, not 9.1e+02x."""
    if ratio < 10.0:
        return f"{math.ceil(ratio * 10.0 - 1e-9) / 10.0:g}x"
    step = 10 ** (math.floor(math.log10(ratio)) - 1)
    return f"{math.ceil(ratio / step - 1e-9) * step:,}x"


def unreached_share(weight: WeightSummary, floor_share: float, alpha: float) -> float:
    """The share ``m`` of the target's probability the log may not have reached (module docstring)."""
    low, high = weight.mean_interval(alpha)
    share = max(floor_share, 1.0 - low, high - 1.0)
    return min(max(share, 0.0), 1.0) if math.isfinite(share) else 1.0


def missing_share(weight: WeightSummary, alpha: float) -> float:
    """The share of a supported target's probability the log shows unreached (module docstring):
    the point estimate ``1 - mean weight`` where the mean weight's ``1 - alpha`` interval lies
    below 1, else 0 (the interval holds 1: the sample is consistent with reaching everything)."""
    _, high = weight.mean_interval(alpha)
    if not high < 1.0:
        return 0.0
    return min(max(1.0 - weight.mean, 0.0), 1.0)


def unreached_bounds(
    ci_low: float, ci_high: float, share: float, reward_range: tuple[float, float]
) -> tuple[float, float]:
    """``[ci_low, ci_high]`` widened by ``share`` times the reward range, clipped to that range."""
    r_min, r_max = reward_range
    spread = share * (r_max - r_min)
    low = ci_low - spread if math.isfinite(ci_low) else r_min
    high = ci_high + spread if math.isfinite(ci_high) else r_max
    return max(low, r_min), min(high, r_max)


def finite_or_none(value: float) -> Any:
    """JSON has no inf or NaN: such a diagnostic is written as null."""
    return value if math.isfinite(value) else None
