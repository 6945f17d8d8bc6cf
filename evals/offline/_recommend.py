"""The recommendation for one target: which estimator memabra stands behind, its support verdict,
and, where unsupported, the bounds its interval widens to.

The rule (:data:`RECOMMENDED_ORDER`): the first estimator whose weight passes the support verdict
(:mod:`memabra.evals.offline._support`): cascade DR (unbiased under support, but its joint weight
runs out of effective samples as slates lengthen), then the pseudo-inverse estimator PI (additive
weights, many more effective samples, unbiased when the reward is additive over slots; without a
reward model, whose extrapolation PI-DR's non-additive residual leaks; and only where the picks'
outcomes do not show the reward is non-additive, :mod:`._additivity`). When neither passes, the
first is reported with ``supported`` false and its first failing rule as the reason, followed by
the fallback's where that differs, and its interval widened to worst-case bounds
(:func:`~memabra.evals.offline._support.unreached_bounds`). The order comes from measurement
against on-policy truth (``benchmarks/ope_check.py``, ``docs/ope.md``).
"""

from __future__ import annotations

import math
from typing import Any

from memabra._errors import InvalidRecordError
from memabra._records import OPEResult, RewardWeights, new_id
from memabra.evals.offline._additivity import AdditivityReport
from memabra.evals.offline._evaluation_records import (
    SET_EQUIVALENT,
    WEIGHT_LABELS,
    LogEvaluation,
    Recommended,
    Target,
)
from memabra.evals.offline._slate_model import RewardModelReport
from memabra.evals.offline._support import (
    SupportVerdict,
    WeightSummary,
    finite_or_none,
    floor_verdict,
    support_verdict,
    unreached_bounds,
    unreached_share,
)
from memabra.evals.ope import IntervalMethod, PolicyValueInterval, SlateTerms, SlotEstimator, StreamingEstimate

__all__ = [
    "ASSUMES_ADDITIVE",
    "RECOMMENDED_ESTIMATOR",
    "RECOMMENDED_ORDER",
    "WEIGHTLESS",
    "WEIGHT_LABELS",
    "pick_replay",
    "summarise",
]

RECOMMENDED_ORDER: tuple[str, ...] = ("cdr", "pi")
RECOMMENDED_ESTIMATOR = RECOMMENDED_ORDER[0]
# estimators unbiased only for a reward additive over slots: not recommended where the log shows its
# reward is not (memabra.evals.offline._additivity)
ASSUMES_ADDITIVE = frozenset({"pi", "snpi", "pi-dr"})
# estimators that weight no decision (the direct method): their verdict is the floor rule's alone
WEIGHTLESS = frozenset({"dm"})


def pick_replay(summaries: list[dict[str, WeightSummary]], floors: list[float], alpha: float) -> int:
    """The replay the estimate uses: the one whose joint weight the support verdict accepts, the
    larger effective sample size if both are, else the set-equivalent one. Only weights decide,
    never rewards."""
    verdicts = [
        support_verdict(s["joint_weight"], f, alpha, "joint").supported for s, f in zip(summaries, floors, strict=True)
    ]
    if verdicts[0] and verdicts[1]:
        ess = [s["joint_weight"].effective_sample_size for s in summaries]
        return int(ess[1] > ess[0])
    return 1 if verdicts[1] else 0


def summarise(
    target: Target,
    streams: list[StreamingEstimate[SlateTerms]],
    summaries: dict[str, WeightSummary],
    floor_share: float,
    count: int,
    logging_value: float,
    report: RewardModelReport | None,
    alpha: float,
    weights: RewardWeights | None,
    reward_range: tuple[float, float],
    replay: str = SET_EQUIVALENT,
    additivity: AdditivityReport | None = None,
) -> LogEvaluation:
    estimates: dict[str, PolicyValueInterval] = {}
    for stream in streams:
        name = stream.estimator.estimator_name
        try:
            estimates[name] = stream.estimate_interval(alpha)
        except InvalidRecordError:  # a self-normalised estimate over all-zero weights is undefined
            estimates[name] = PolicyValueInterval(math.nan, math.nan, math.nan, alpha, IntervalMethod.NORMAL)
    # every estimator's own verdict (its weight, its definedness, additivity where it assumes it):
    # the recommendation reads the first ones, and the other rows are not left to look supported
    verdicts = {
        name: _estimator_verdict(name, estimates[name], summaries, floor_share, alpha, additivity) for name in estimates
    }
    chosen = next((name for name in RECOMMENDED_ORDER if verdicts[name].supported), RECOMMENDED_ORDER[0])
    verdict, value = verdicts[chosen], estimates[chosen]
    ci_low, ci_high, unreached = value.ci_low, value.ci_high, 0.0
    if not verdict.supported:
        # the first estimator's failure leads; a fallback's follows where it failed on another rule
        others = [f"{n}: {verdicts[n].reason}" for n in RECOMMENDED_ORDER if verdicts[n].rule != verdict.rule]
        # and the interval becomes the bounds of what the log may not have reached (._support)
        weight_name = SlotEstimator(estimator_name=chosen).weight_name
        unreached = unreached_share(summaries[weight_name], floor_share, alpha)
        ci_low, ci_high = unreached_bounds(value.ci_low, value.ci_high, unreached, reward_range)
        verdict = SupportVerdict(
            False,
            f"{'; '.join([verdict.reason, *others])}; interval widened to the reward range for the {unreached:.0%} of the target's "
            "probability the log may not have reached",
            verdict.rule,
        )
    recommended = Recommended(chosen, value.value, ci_low, ci_high, verdict.supported, verdict.reason)
    diagnostics = {WEIGHT_LABELS[name]: summary.as_dict(alpha) for name, summary in summaries.items()}
    run_id = new_id()
    details: dict[str, Any] = {
        "logging_value": logging_value,
        "weights": weights.as_dict() if weights else None,
        "supported": verdict.supported,
        "reason": verdict.reason,
        "replay": replay,
        "floor_share": floor_share,
        "unreached_share": unreached,
        "diagnostics": {k: {m: finite_or_none(v) for m, v in d.items()} for k, d in diagnostics.items()},
        "reward_model": report.as_dict() if report else None,
        "additivity": additivity.as_dict() if additivity else None,
    }
    results = tuple(
        OPEResult(
            policy=target.policy,
            estimator=name,
            value=e.value,
            # the recommended row carries the recommendation's interval (bounds where unsupported)
            ci_low=ci_low if name == chosen else e.ci_low,
            ci_high=ci_high if name == chosen else e.ci_high,
            n_rounds=count,
            alpha=alpha,
            snapshot_version=target.snapshot_version,
            details={
                **details,
                "recommended": name == chosen,
                "estimator_supported": verdicts[name].supported,
                "estimator_reason": verdicts[name].reason,
            },
            run_id=run_id,
        )
        for name, e in estimates.items()
        if math.isfinite(e.value) and math.isfinite(e.ci_low) and math.isfinite(e.ci_high)
    )
    return LogEvaluation(
        policy=target.policy,
        snapshot_version=target.snapshot_version,
        n_rounds=count,
        logging_value=logging_value,
        estimates=estimates,
        recommended=recommended,
        diagnostics=diagnostics,
        floor_share=floor_share,
        reward_model=report,
        results=results,
        replay=replay,
        additivity=additivity,
        unreached_share=unreached,
        verdicts=verdicts,
    )


def _estimator_verdict(
    name: str,
    estimate: PolicyValueInterval,
    summaries: dict[str, WeightSummary],
    floor_share: float,
    alpha: float,
    additivity: AdditivityReport | None,
) -> SupportVerdict:
    """The support verdict of one estimator's weight, or why the estimator cannot be read here."""
    if name in WEIGHTLESS:
        verdict = floor_verdict(floor_share)
    else:
        weight_name = SlotEstimator(estimator_name=name).weight_name
        verdict = support_verdict(summaries[weight_name], floor_share, alpha, WEIGHT_LABELS[weight_name])
    if not math.isfinite(estimate.ci_low):
        return SupportVerdict(False, f"{name} is undefined on this log", "undefined")
    if name in ASSUMES_ADDITIVE and verdict.supported and additivity is not None and not additivity.additive:
        return SupportVerdict(False, additivity.reason(), "additivity")
    return verdict
