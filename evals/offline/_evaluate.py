"""Offline evaluation of a routing policy on the memabra episode log.

Each logged decision is a slate drawn slot by slot; its logged propensity is the product of the
chosen options' probabilities. For a target policy pi_e the router recomputes, on the same
logged candidate set and with the logged choices forced, the probability of each logged pick;
the round's importance weight is the slate's (standard, joint-propensity slate IPS):

    w_i = prod_s pi_e(a_is | x_i, a_i1..a_i(s-1)) / prod_s pi_b(a_is | x_i, a_i1..a_i(s-1))

and the estimators of :mod:`memabra.evals.ope` apply with ``pscore`` = the logged joint
propensity and ``evaluation_policy_pscore`` = the target's. The reward model of DM / DR is the
mean logged reward (fitted in a first pass over the log), so DR is IPS with a control variate —
its variance is lower whenever rewards share a common level. Everything streams: two passes of a
server-side cursor, memory flat in the number of decisions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from memabra._errors import InvalidRecordError
from memabra._records import OPEResult, RewardBreakdown, RewardWeights, Selection, new_id
from memabra.evals.ope import EstimatorSettings, RoundBatch, StreamingEstimate, make_estimators
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = ["LogEvaluation", "evaluate_on_log", "logged_round_batches", "logged_value", "target_pscore"]


@dataclass(frozen=True, slots=True)
class LogEvaluation:
    """Estimates of one target policy on a slice of the log, plus the logging policy's own value
    (the mean logged reward) on the same slice."""

    policy: str
    snapshot_version: str | None
    n_rounds: int
    logging_value: float
    results: tuple[OPEResult, ...]
    effective_sample_size: float
    max_weight: float
    mean_weight: float
    zero_weight_share: float


def target_pscore(router: Router, selection: Selection) -> float:
    """pi_e of the logged slate: the product over slots of the target's probability of the logged pick."""
    p = 1.0
    for draw, probabilities in zip(selection.slots, router.slot_probabilities(selection), strict=True):
        p *= probabilities[draw.candidate_ids.index(draw.chosen_id)]
    return p


def _reward(reward: RewardBreakdown, weights: RewardWeights | None) -> float:
    return reward.reweighted(weights).total if weights is not None else reward.total


def logged_round_batches(
    log: EpisodeLog,
    router: Router,
    *,
    baseline: float,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RewardWeights | None = None,
    chunk_size: int = 1000,
) -> Iterator[RoundBatch]:
    """The log as :class:`RoundBatch` chunks for ``router``; decisions without a reward are skipped."""
    rewards: list[float] = []
    pscores: list[float] = []
    targets: list[float] = []
    for selection, reward in log.iter_selections(since=since, until=until, chunk_size=chunk_size):
        if reward is None:
            continue
        rewards.append(_reward(reward, weights))
        pscores.append(selection.propensity)
        targets.append(target_pscore(router, selection))
        if len(rewards) >= chunk_size:
            yield _batch(rewards, pscores, targets, baseline)
            rewards, pscores, targets = [], [], []
    if rewards:
        yield _batch(rewards, pscores, targets, baseline)


def _batch(rewards: list[float], pscores: list[float], targets: list[float], baseline: float) -> RoundBatch:
    q = np.full(len(rewards), baseline)
    return RoundBatch(
        reward=np.asarray(rewards),
        pscore=np.asarray(pscores),
        evaluation_policy_pscore=np.asarray(targets),
        estimated_reward_factual=q,
        estimated_reward_policy=q,
    )


def logged_value(
    log: EpisodeLog, *, since: datetime | None = None, until: datetime | None = None, weights: RewardWeights | None = None
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


def evaluate_on_log(
    log: EpisodeLog,
    router: Router,
    *,
    policy: str,
    snapshot_version: str | None = None,
    estimators: Sequence[str] = ("ipw", "snipw", "dm", "dr", "sndr"),
    settings: EstimatorSettings | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RewardWeights | None = None,
    alpha: float = 0.05,
    chunk_size: int = 1000,
) -> LogEvaluation:
    """Estimate ``router``'s value on the logged decisions between ``since`` and ``until``."""
    baseline, _, n = logged_value(log, since=since, until=until, weights=weights)
    if n == 0:
        raise InvalidRecordError("the episode log holds no rewarded decisions in the chosen range: nothing to evaluate")
    streams = [StreamingEstimate(e) for e in make_estimators(list(estimators), settings)]
    for batch in logged_round_batches(log, router, baseline=baseline, since=since, until=until, weights=weights, chunk_size=chunk_size):
        for stream in streams:
            stream.update(batch)
    run_id = new_id()
    results = []
    for stream in streams:
        interval = stream.estimate_interval(alpha)
        results.append(
            OPEResult(
                policy=policy,
                estimator=stream.estimator.estimator_name,
                value=interval.value,
                ci_low=interval.ci_low,
                ci_high=interval.ci_high,
                n_rounds=stream.n_rounds,
                alpha=alpha,
                snapshot_version=snapshot_version,
                details={"logging_value": baseline, "weights": weights.as_dict() if weights else None},
                run_id=run_id,
            )
        )
    diag = next((s.diagnostics() for s in streams if s.diagnostics() is not None), None)
    return LogEvaluation(
        policy=policy,
        snapshot_version=snapshot_version,
        n_rounds=n,
        logging_value=baseline,
        results=tuple(results),
        effective_sample_size=diag.effective_sample_size if diag else math.nan,
        max_weight=diag.max_weight if diag else math.nan,
        mean_weight=diag.mean_weight if diag else math.nan,
        zero_weight_share=diag.zero_weight_share if diag else math.nan,
    )
