"""The recommendation for one target: which estimator memabra stands behind, its support verdict,
and, where unsupported, the bounds its interval widens to.

The rule (:data:`RECOMMENDED_ORDER`): the first estimator whose weight passes the support verdict
(:mod:`memabra.evals.offline._support`): cascade DR (unbiased under support, but its joint weight
runs out of effective samples as slates lengthen), then the pseudo-inverse estimator PI (additive
weights, unbiased when the reward is additive over slots and the draws independent; without a
reward model, whose extrapolation PI-DR's non-additive residual leaks; and only where the picks'
outcomes do not show the reward is non-additive, :mod:`._additivity`, nor cascade DR minus PI on the
same decisions shows PI biased by memabra's sequential draws, :mod:`._bias`, which judges PI-DR,
IIPS and IDR too: they lean on the same per-draw ratios). When neither passes, the
first is reported with ``supported`` false and its first failing rule as the reason, followed by
the fallback's where that differs, and its interval widened to worst-case bounds
(:func:`~memabra.evals.offline._support.unreached_bounds`). A supported recommendation's interval
is widened the same way by the share of the target's probability its sample shows unreached
(:func:`~memabra.evals.offline._support.missing_share`). The order comes from measurement
against on-policy truth (``benchmarks/ope_check.py``, ``docs/ope.md``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from memabra._errors import InvalidRecordError
from memabra._records import OPEResult, RewardWeights, new_id
from memabra.evals.offline._additivity import AdditivityReport
from memabra.evals.offline._bias import (
    BIAS_GAPS,
    GAP_ESTIMATORS,
    SEQUENTIAL_BIAS,
    SLOT_SUM_CHECKED,
    bias_verdicts,
    sequential_bias_verdict,
)
from memabra.evals.offline._evaluation_records import (
    SET_EQUIVALENT,
    WEIGHT_LABELS,
    WEIGHTLESS,
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
    missing_share,
    overdrawn_verdict,
    support_verdict,
    unreached_bounds,
    unreached_share,
)
from memabra.evals.ope import IntervalMethod, PolicyValueInterval, SlateTerms, SlotEstimator, StreamingEstimate

__all__ = [
    "ASSUMES_ADDITIVE",
    "BIAS_GAPS",
    "GAP_ESTIMATORS",
    "RECOMMENDED_ESTIMATOR",
    "RECOMMENDED_ORDER",
    "SEQUENTIAL_BIAS",
    "SLOT_SUM_CHECKED",
    "WEIGHTLESS",
    "WEIGHT_LABELS",
    "pick_replay",
    "sequential_bias_verdict",
    "summarise",
]

RECOMMENDED_ORDER: tuple[str, ...] = ("cdr", "pi")
RECOMMENDED_ESTIMATOR = RECOMMENDED_ORDER[0]
# estimators unbiased only for a reward additive over slots: not recommended where the log shows its
# reward is not (memabra.evals.offline._additivity)
ASSUMES_ADDITIVE = frozenset({"pi", "snpi", "pi-dr"})
# a sample variance, and so any interval, needs two decisions
MIN_DECISIONS = 2
# why the direct method is never read as an answer, even where its floor and skill rules pass
_MODEL_ONLY = (
    "the direct method's interval holds its sampling error only, not its reward model's bias on the "
    "selections the log rarely drew (it covered the truth in none of the simulator's runs, docs/ope.md): "
    "the model's guess, to read beside a weighted estimate"
)


def pick_replay(summaries: list[dict[str, WeightSummary]], floors: list[float], alpha: float) -> int:
    """The replay the estimate uses: the one whose joint weight the support verdict accepts, the
    larger effective sample size if both are. If neither is, the one that fails only for want of
    effective samples (its weight reaches the target; more of the same log would do), the larger
    if both do; else the set-equivalent one. Only weights decide, never rewards.

    Where the logger's own choices reach the target's set only through its floor, the
    set-equivalent replay spreads the target over orders the log practically never draws, and its
    mean weight falls short of 1 ("does not cover this target") while the target's own order,
    which a reference share draws often, only lacks samples (``memabra demo``'s top-k)."""
    verdicts = [support_verdict(s["joint_weight"], f, alpha, "joint") for s, f in zip(summaries, floors, strict=True)]
    ess = [s["joint_weight"].effective_sample_size for s in summaries]
    for acceptable in ((True,), (False,)):
        candidates = [
            r
            for r, v in enumerate(verdicts)
            if v.supported in acceptable and (v.supported or v.rule == "effective sample size")
        ]
        if candidates:
            return max(candidates, key=lambda r: (ess[r], -r))
    return 0


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
    other_replays: Sequence[tuple[str, WeightSummary]] = (),
    gaps: Mapping[str, PolicyValueInterval] | None = None,
    slot_gap: PolicyValueInterval | None = None,
) -> LogEvaluation:
    """One target's evaluation from its chosen replay's streams. ``other_replays``: the joint weights
    of the replays not chosen, by name; they weight the same draws, so one that shows them
    over-drawn (:func:`~._support.overdrawn_verdict`) leaves no weighted estimator supported, and
    the bounds widen by as much as it shows them over-represented. ``gaps``: cascade DR minus each of
    :data:`GAP_ESTIMATORS` on the same decisions, by name; ``slot_gap``: IIPS's slot sum
    ``q_0 + sum_s Q_s`` minus the direct method on the same decisions (:mod:`._bias`)."""
    estimates = {stream.estimator.estimator_name: _estimate(stream, alpha) for stream in streams}
    joint = support_verdict(summaries["joint_weight"], floor_share, alpha, WEIGHT_LABELS["joint_weight"])
    gaps = {name: gap for name, gap in (gaps or {}).items() if name in estimates}
    # every estimator's own verdict (its weight, its definedness, additivity where it assumes it, the
    # bias the log shows where it leans on per-draw ratios, ._bias): the recommendation reads the first
    # ones, and the other rows are not left to look supported
    verdicts = {
        name: _estimator_verdict(name, estimates[name], summaries, floor_share, alpha, additivity, count, report)
        for name in estimates
    }
    verdicts = bias_verdicts(verdicts, joint, gaps, slot_gap)
    overdrawn, overdrawn_weight = next(
        ((v, w) for name, w in other_replays if (v := overdrawn_verdict(w, alpha, "joint", name)) is not None),
        (None, None),
    )
    if overdrawn is not None:
        verdicts = {
            name: overdrawn if verdict.supported and name not in WEIGHTLESS else verdict
            for name, verdict in verdicts.items()
        }
    chosen = next((name for name in RECOMMENDED_ORDER if verdicts[name].supported), RECOMMENDED_ORDER[0])
    verdict, value = verdicts[chosen], estimates[chosen]
    weight = summaries[SlotEstimator(estimator_name=chosen).weight_name]
    if verdict.supported:
        # what the sample shows unreached biases the estimate as much as it would an unsupported
        # one's: the tolerance of rule 2 decides the verdict, not how wide the interval is
        unreached = missing_share(weight, alpha)
    else:
        # the bounds of what the log may not have reached (._support)
        unreached = unreached_share(weight, floor_share, alpha)
        if overdrawn_weight is not None:
            # as much as the over-drawn replay shows the draws over-represented (its ci_high - 1)
            unreached = max(unreached, unreached_share(overdrawn_weight, 0.0, alpha))
    ci_low, ci_high = value.ci_low, value.ci_high
    if unreached > 0.0 or not verdict.supported:  # a supported interval the log shows complete stays as it is
        ci_low, ci_high = unreached_bounds(value.ci_low, value.ci_high, unreached, reward_range)
    if not verdict.supported:
        # the first estimator's failure leads; a fallback's follows where it failed on another rule
        others = [f"{n}: {verdicts[n].reason}" for n in RECOMMENDED_ORDER if verdicts[n].rule != verdict.rule]
        bounded = math.isfinite(value.ci_low) and math.isfinite(value.ci_high)
        note = _widened(unreached) if bounded else "; its bounds are the reward's whole range"
        verdict = SupportVerdict(False, "; ".join([verdict.reason, *others]) + note, verdict.rule)
    # an unsupported target's raw estimate may lie beyond its own bounds (large weights on a log that
    # barely reaches it; above the most any policy can earn): it is reported at the bounds' edge,
    # the raw one kept in details. A supported one stays raw, as its paired differences use it.
    point = value.value
    if not verdict.supported and math.isfinite(point) and ci_low <= ci_high:
        point = min(max(point, ci_low), ci_high)
    recommended = Recommended(chosen, point, ci_low, ci_high, verdict.supported, verdict.reason)
    diagnostics = {WEIGHT_LABELS[name]: summary.diagnostics(alpha) for name, summary in summaries.items()}
    run_id = new_id()
    details: dict[str, Any] = {
        "logging_value": logging_value,
        "weights": weights.as_dict() if weights else None,
        "supported": verdict.supported,
        "reason": verdict.reason,
        "replay": replay,
        "floor_share": floor_share,
        "unreached_share": unreached,
        "unclipped_value": finite_or_none(value.value) if point != value.value else None,
        "diagnostics": {k: {m: finite_or_none(v) for m, v in d.as_dict().items()} for k, d in diagnostics.items()},
        "reward_model": report.as_dict() if report else None,
        "additivity": additivity.as_dict() if additivity else None,
    }
    # the recommended row carries the recommendation's interval (widened, or bounds where unsupported)
    intervals = {name: (ci_low, ci_high) if name == chosen else (e.ci_low, e.ci_high) for name, e in estimates.items()}
    results = tuple(
        OPEResult(
            policy=target.policy,
            estimator=name,
            value=point if name == chosen else e.value,
            ci_low=intervals[name][0],
            ci_high=intervals[name][1],
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
        if math.isfinite(e.value) and all(math.isfinite(x) for x in intervals[name])
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
        gaps=gaps,
        slot_gap=slot_gap,
    )


def _estimate(stream: StreamingEstimate[SlateTerms], alpha: float) -> PolicyValueInterval:
    """The estimator's value and normal interval; an unbounded interval around the point estimate
    below :data:`MIN_DECISIONS`, NaN where the estimate is undefined."""
    try:
        if stream.n_rounds < MIN_DECISIONS:
            return PolicyValueInterval(
                stream.estimate_policy_value(), -math.inf, math.inf, alpha, IntervalMethod.NORMAL
            )
        return stream.estimate_interval(alpha)
    except InvalidRecordError:  # a self-normalised estimate over all-zero weights is undefined
        return PolicyValueInterval(math.nan, math.nan, math.nan, alpha, IntervalMethod.NORMAL)


def _widened(unreached: float) -> str:
    """The reason's note on the bounds; none where nothing was widened."""
    if unreached <= 0.0:
        return ""
    if unreached >= 1.0:
        return "; interval widened to the reward's whole range (the log may not have reached any of the target's probability)"
    share = f"{unreached:.0%}" if unreached >= 0.1 else f"{unreached:.1%}" if unreached >= 0.001 else "under 0.1%"
    return (
        f"; interval widened to the reward range for the {share} of the target's probability "
        "the log may not have reached"
    )


def _estimator_verdict(
    name: str,
    estimate: PolicyValueInterval,
    summaries: dict[str, WeightSummary],
    floor_share: float,
    alpha: float,
    additivity: AdditivityReport | None,
    count: int,
    report: RewardModelReport | None = None,
) -> SupportVerdict:
    """The support verdict of one estimator's weight, or why the estimator cannot be read here.
    The direct method weights nothing: it stands on its reward model, whose bias its interval leaves
    out, so it is never supported; the reason names the floor rule, or a model that predicts
    held-out rewards no better than their mean (its differences between targets are noise), first."""
    if count < MIN_DECISIONS:
        return SupportVerdict(
            False,
            f"an interval needs at least {MIN_DECISIONS} decisions; the log has {count} (the point estimate stands)",
            "too few decisions",
        )
    if name in WEIGHTLESS:
        verdict = floor_verdict(floor_share)
        if verdict.supported and report is not None and not report.heldout_rmse < report.constant_rmse:
            verdict = SupportVerdict(
                False,
                f"its reward model predicts held-out rewards no better than a constant (RMSE "
                f"{report.heldout_rmse:.3f} against {report.constant_rmse:.3f}): what it says differs "
                "between policies is noise",
                "reward model",
            )
        if verdict.supported:
            verdict = SupportVerdict(False, _MODEL_ONLY, "model only")
    else:
        weight_name = SlotEstimator(estimator_name=name).weight_name
        verdict = support_verdict(summaries[weight_name], floor_share, alpha, WEIGHT_LABELS[weight_name])
    if not math.isfinite(estimate.value):
        return SupportVerdict(
            False, f"{name} is undefined on this log (every weight it normalises by is 0)", "undefined"
        )
    if name in ASSUMES_ADDITIVE and verdict.supported and additivity is not None and not additivity.additive:
        return SupportVerdict(False, additivity.reason(), "additivity")
    return verdict
