"""Offline evaluation of routing policies on the memabra episode log.

Two streamed passes over the rewarded decisions, memory flat in their number: the first offers
each decision to the reward model's bounded reservoir (:mod:`memabra.evals.offline._slate_model`)
and sums the logged rewards; the second reduces each decision, for every target at once, to the
terms of :class:`~memabra.evals.ope.SlateTerms` and folds them into every estimator's running
moments and the support diagnostics. Intervals are normal (delta method).

``recommended`` is, per target, the first of :data:`RECOMMENDED_ORDER` whose weight passes the
support verdict (:mod:`memabra.evals.offline._support`): cascade DR (unbiased under support, but
its joint weight runs out of effective samples as slates lengthen), then the pseudo-inverse
estimator PI (additive weights, many more effective samples, unbiased when the reward is additive
over slots; without a reward model, whose extrapolation PI-DR's non-additive residual leaks; and only
where the picks' outcomes do not show the reward is non-additive, :mod:`._additivity`). When
neither passes, the first is reported with ``supported`` false and its first failing rule as the
reason, followed by the fallback's where that differs. The order comes from measurement against on-policy truth (``benchmarks/ope_check.py``,
``docs/ope.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memabra._errors import InvalidRecordError
from memabra._records import (
    OPEResult,
    RewardBreakdown,
    RewardWeights,
    Selection,
    new_id,
)
from memabra.evals.offline._additivity import AdditivityCheck, AdditivityReport
from memabra.evals.offline._evaluation_records import OWN_ORDER, SET_EQUIVALENT, LogEvaluation, Recommended, Target
from memabra.evals.offline._slate_model import (
    DecisionTable,
    RewardModelReport,
    SlateRewardModel,
)
from memabra.evals.offline._support import (
    SupportVerdict,
    WeightSummary,
    finite_or_none,
    support_verdict,
    unreached_bounds,
    unreached_share,
)
from memabra.evals.offline._terms import DecisionContext, RowBatch, decision_terms
from memabra.evals.ope import (
    NEEDS_REWARD_MODEL,
    SLOT_ESTIMATOR_NAMES,
    IntervalMethod,
    PolicyValueInterval,
    SlateTerms,
    SlotEstimator,
    StreamingEstimate,
    check_alpha,
    make_slot_estimators,
)
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = [
    "DEFAULT_ESTIMATORS",
    "RECOMMENDED_ESTIMATOR",
    "RECOMMENDED_ORDER",
    "LogEvaluation",
    "Recommended",
    "Target",
    "evaluate_on_log",
    "evaluate_policies",
    "logged_value",
]

RECOMMENDED_ORDER: tuple[str, ...] = ("cdr", "pi")
RECOMMENDED_ESTIMATOR = RECOMMENDED_ORDER[0]
# estimators unbiased only for a reward additive over slots: not recommended where the log shows its
# reward is not (memabra.evals.offline._additivity)
ASSUMES_ADDITIVE = frozenset({"pi", "snpi", "pi-dr"})
DEFAULT_ESTIMATORS: tuple[str, ...] = SLOT_ESTIMATOR_NAMES
_REPLAYS = (SET_EQUIVALENT, OWN_ORDER)
# decisions reduced per target before their terms are folded into the running moments
_CHUNK = 512
_WEIGHT_LABELS = {
    "joint_weight": "joint",
    "pi_weight": "pseudo-inverse",
    "slot_weight": "per-slot",
}


def _reward(reward: RewardBreakdown, weights: RewardWeights | None) -> float:
    return reward.reweighted(weights).total if weights is not None else reward.total


def logged_value(
    log: EpisodeLog,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RewardWeights | None = None,
) -> tuple[float, float, int]:
    """Mean logged reward, its standard error and the number of rewarded decisions (one pass)."""
    n, mean, m2 = 0, 0.0, 0.0
    for _, reward in log.iter_selections(since=since, until=until):
        if reward is None:
            continue
        n += 1
        x = _reward(reward, weights)
        delta = x - mean
        mean += delta / n
        m2 += delta * (x - mean)
    if n == 0:
        return math.nan, math.nan, 0
    return mean, math.sqrt(m2 / (n - 1) / n) if n > 1 else math.inf, n


def evaluate_policies(
    log: EpisodeLog,
    targets: Sequence[Target],
    *,
    estimators: Sequence[str] = DEFAULT_ESTIMATORS,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RewardWeights | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> tuple[LogEvaluation, ...]:
    """Estimate every target's value on the rewarded decisions between ``since`` and ``until``."""
    check_alpha(alpha)
    if not targets:
        raise InvalidRecordError("name at least one policy to evaluate")
    names = list(estimators)
    names.extend(name for name in RECOMMENDED_ORDER if name not in names)
    chosen = make_slot_estimators(names)

    def rewarded() -> Any:
        for decision in log.iter_decisions(since=since, until=until):
            if decision.reward is not None:
                yield decision.selection, _reward(decision.reward, weights), decision.used_ids

    model: SlateRewardModel | None = None
    report: RewardModelReport | None = None
    needs_model = any(name in NEEDS_REWARD_MODEL for name in names)
    if needs_model:
        model = SlateRewardModel(random_state=seed)
    additivity = AdditivityCheck(random_state=seed)
    total, count = 0.0, 0
    lowest, highest = math.inf, -math.inf
    for selection, reward, used_ids in rewarded():
        count += 1
        total += reward
        lowest, highest = min(lowest, reward), max(highest, reward)
        table = DecisionTable.of(selection)
        additivity.observe(selection, reward, table, used_ids, count - 1)
        if model is not None:
            model.observe(selection, reward, table, count - 1)
    if count == 0:
        raise InvalidRecordError(
            "reward: the episode log holds no rewarded decisions in the chosen range: nothing to evaluate"
        )
    if model is not None:
        report = model.fit()
    additive = additivity.fit(alpha)
    # per target, per replay (set-equivalent, own order): the estimators' moments, weights, floors
    streams = [[[StreamingEstimate(e) for e in chosen] for _ in _REPLAYS] for _ in targets]
    summaries = [[{name: WeightSummary() for name in _WEIGHT_LABELS} for _ in _REPLAYS] for _ in targets]
    floors = [[0.0 for _ in _REPLAYS] for _ in targets]

    def fold_in(chunk: list[tuple[Selection, float]], start: int) -> None:
        rows = RowBatch(model)
        contexts = [
            DecisionContext.of(selection, reward, rows, start + i) for i, (selection, reward) in enumerate(chunk)
        ]
        pending = [
            [
                decision_terms(c, target.router, rows, seed=start + i, model=model is not None)
                for i, c in enumerate(contexts)
            ]
            for target in targets
        ]
        rows.run()
        for t, per_target in enumerate(pending):
            # a stochastic target has one replay: its own order is its set-equivalent (terms once)
            replays = ([pair[0] for pair in per_target], [pair[1] or pair[0] for pair in per_target])
            unique = {id(p): p for replayed in replays for p in replayed}
            terms = {key: p.terms(rows) for key, p in unique.items()}
            for r, replayed in enumerate(replays):
                batch = SlateTerms(*np.asarray([terms[id(p)] for p in replayed], dtype=np.float64).T)
                for stream in streams[t][r]:
                    stream.update(batch)
                for name, summary in summaries[t][r].items():
                    summary.update(getattr(batch, name))
                floors[t][r] += sum(p.floor_share for p in replayed)

    chunk: list[tuple[Selection, float]] = []
    done = 0
    for selection, reward, _ in rewarded():
        chunk.append((selection, reward))
        if len(chunk) >= _CHUNK:
            fold_in(chunk, done)
            done += len(chunk)
            chunk = []
            if progress is not None:
                progress(done)
    if chunk:
        fold_in(chunk, done)
        done += len(chunk)
        if progress is not None:
            progress(done)
    out = []
    logging_value = total / count
    # what a target's unreached share could have earned: anything the reward allows, or the log held
    allowed = (weights or RewardWeights()).total_range()
    reward_range = (min(allowed[0], lowest), max(allowed[1], highest))
    for t, target in enumerate(targets):
        r = _pick_replay(summaries[t], [f / count for f in floors[t]], alpha)
        out.append(
            _summarise(
                target,
                streams[t][r],
                summaries[t][r],
                floors[t][r] / count,
                count,
                logging_value,
                report,
                alpha,
                weights,
                reward_range,
                _REPLAYS[r],
                additive,
            )
        )
    return tuple(out)


def _pick_replay(summaries: list[dict[str, WeightSummary]], floors: list[float], alpha: float) -> int:
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


def _summarise(
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
    verdicts = {}
    for name in RECOMMENDED_ORDER:
        weight_name = SlotEstimator(estimator_name=name).weight_name
        verdict = support_verdict(summaries[weight_name], floor_share, alpha, _WEIGHT_LABELS[weight_name])
        if not math.isfinite(estimates[name].ci_low):
            verdict = SupportVerdict(False, f"{name} is undefined on this log", "undefined")
        elif name in ASSUMES_ADDITIVE and verdict.supported and additivity is not None and not additivity.additive:
            verdict = SupportVerdict(False, additivity.reason(), "additivity")
        verdicts[name] = verdict
    chosen = next((name for name in RECOMMENDED_ORDER if verdicts[name].supported), RECOMMENDED_ORDER[0])
    verdict, value = verdicts[chosen], estimates[chosen]
    if not verdict.supported:
        # the first estimator's failure leads; a fallback's follows where it failed on another rule
        others = [f"{n}: {verdicts[n].reason}" for n in RECOMMENDED_ORDER if verdicts[n].rule != verdict.rule]
        verdict = SupportVerdict(False, "; ".join([verdict.reason, *others]), verdict.rule)
    ci_low, ci_high = value.ci_low, value.ci_high
    unreached = 0.0
    if not verdict.supported:
        weight_name = SlotEstimator(estimator_name=chosen).weight_name
        unreached = unreached_share(summaries[weight_name], floor_share, alpha)
        ci_low, ci_high = unreached_bounds(ci_low, ci_high, unreached, reward_range)
        verdict = SupportVerdict(
            False,
            f"{verdict.reason}; interval widened to the reward range for the {unreached:.0%} of the target's "
            "probability the log may not have reached",
            verdict.rule,
        )
    recommended = Recommended(chosen, value.value, ci_low, ci_high, verdict.supported, verdict.reason)
    diagnostics = {_WEIGHT_LABELS[name]: summary.as_dict(alpha) for name, summary in summaries.items()}
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
            details={**details, "recommended": name == chosen},
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
    )


def evaluate_on_log(
    log: EpisodeLog,
    router: Router,
    *,
    policy: str,
    snapshot_version: str | None = None,
    estimators: Sequence[str] = DEFAULT_ESTIMATORS,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RewardWeights | None = None,
    alpha: float = 0.05,
    seed: int = 0,
) -> LogEvaluation:
    """One target's evaluation (see :func:`evaluate_policies`)."""
    return evaluate_policies(
        log,
        [Target(policy, router, snapshot_version)],
        estimators=estimators,
        since=since,
        until=until,
        weights=weights,
        alpha=alpha,
        seed=seed,
    )[0]
