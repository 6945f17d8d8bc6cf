"""Offline evaluation of routing policies on the memabra episode log.

Two streamed passes over the rewarded decisions, memory flat in their number: the first offers
each decision to the reward model's bounded reservoir (:mod:`memabra.evals.offline._slate_model`)
and sums the logged rewards; the second reduces each decision, for every target at once, to the
terms of :class:`~memabra.evals.ope.SlateTerms` and folds them into every estimator's running
moments and the support diagnostics. Intervals are normal (delta method).

Only final rewards are read unless ``include_provisional``: a provisional reward may still change
as feedback arrives, and the learner reads final ones only too. A stochastic target's rollouts on
the decision at position ``i`` are seeded from ``(seed, i)``, so one seed gives one estimate.

``recommended`` and its rule live in :mod:`memabra.evals.offline._recommend`; paired differences
between targets in :mod:`memabra.evals.offline._paired`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from memabra._records import LoggedDecision, RewardBreakdown, RewardWeights, Selection, utcnow
from memabra.evals.bench import refuse_unfinished_bench_log
from memabra.evals.offline._additivity import AdditivityCheck
from memabra.evals.offline._as_of import ReadFingerprint, changed_since, pinned_until, with_window
from memabra.evals.offline._evaluation_records import (
    LOGGING_POLICY,
    OWN_ORDER,
    SET_EQUIVALENT,
    LogEvaluation,
    LoggedValue,
    Recommended,
    Target,
)
from memabra.evals.offline._inputs import (
    check_decision_ids,
    check_logged_by,
    check_seed,
    check_targets,
    check_window,
)
from memabra.evals.offline._logged_by import nothing_read, read_decisions, refuse_unlogged
from memabra.evals.offline._paired import PairedMoments, widen
from memabra.evals.offline._recommend import (
    GAP_ESTIMATORS,
    RECOMMENDED_ESTIMATOR,
    RECOMMENDED_ORDER,
    WEIGHT_LABELS,
    pick_replay,
    summarise,
)
from memabra.evals.offline._run_record import provenance, with_run_record
from memabra.evals.offline._slate_model import DecisionTable, RewardModelReport, SlateRewardModel
from memabra.evals.offline._support import WeightSummary
from memabra.evals.offline._terms import DecisionContext, RowBatch, decision_terms
from memabra.evals.ope import (
    NEEDS_REWARD_MODEL,
    SLOT_ESTIMATOR_NAMES,
    PolicyValueInterval,
    SlateTerms,
    StreamingEstimate,
    check_alpha,
    make_slot_estimators,
)
from memabra.router import Router
from memabra.storage import EpisodeLog

__all__ = [
    "DEFAULT_ESTIMATORS",
    "LOGGING_POLICY",
    "RECOMMENDED_ESTIMATOR",
    "RECOMMENDED_ORDER",
    "LogEvaluation",
    "LoggedValue",
    "Recommended",
    "Target",
    "check_window",
    "evaluate_on_log",
    "evaluate_policies",
    "logged_value",
    "rollout_seed",
]

DEFAULT_ESTIMATORS: tuple[str, ...] = SLOT_ESTIMATOR_NAMES
_REPLAYS = (SET_EQUIVALENT, OWN_ORDER)
# the estimators whose per-decision terms are paired: the recommendable ones (versus), those cascade
# DR minus them on the same decisions judges, and the direct method; then IIPS's slot sum
# q_0 + sum_s Q_s, which minus the direct method shows the model's part of IIPS's and IDR's bias (._bias)
_PAIRED = (*RECOMMENDED_ORDER, *(name for name in (*GAP_ESTIMATORS, "dm") if name not in RECOMMENDED_ORDER))
_SLOT_SUM = "independent_baseline"
_COLUMNS = (*_PAIRED, _SLOT_SUM)
# decisions reduced per target before their terms are folded into the running moments: the reward
# model predicts a chunk's rows in one call, and the chunk's selections are held meanwhile (256 of
# 128 candidates: 60 MB less than 512, at the same speed)
_CHUNK = 256


def _reward(reward: RewardBreakdown, weights: RewardWeights | None) -> float:
    return reward.reweighted(weights).total if weights is not None else reward.total


def rollout_seed(seed: int, position: int) -> int:
    """The seed of a target's rollouts on the decision at ``position``: one stream per (seed,
    position), so the evaluation's ``seed`` decides every rollout and another seed redraws them."""
    return int(np.random.SeedSequence([seed, position]).generate_state(1)[0])


def _readable(decision: LoggedDecision, include_provisional: bool) -> bool:
    return decision.reward is not None and (decision.final or include_provisional)


def logged_value(
    log: EpisodeLog,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    weights: RewardWeights | None = None,
    include_provisional: bool = False,
    decision_ids: Collection[str] | None = None,
    logged_by: str | Collection[str] | None = None,
) -> LoggedValue:
    """Mean logged reward, its standard error and the number of rewarded decisions (one pass);
    final rewards only unless ``include_provisional``; only the decisions ``decision_ids`` names,
    and only those the policies ``logged_by`` names logged, when given."""
    check_window(since, until)
    only = check_decision_ids(decision_ids)
    policies = check_logged_by(logged_by)
    refuse_unlogged(log, policies)
    n, mean, m2 = 0, 0.0, 0.0
    for decision in read_decisions(log, since, until, policies):
        if decision.reward is None or not _readable(decision, include_provisional):
            continue
        if only is not None and decision.selection.id not in only:
            continue
        n += 1
        x = _reward(decision.reward, weights)
        delta = x - mean
        mean += delta / n
        m2 += delta * (x - mean)
    if n == 0:
        return LoggedValue(math.nan, math.nan, 0)
    return LoggedValue(mean, math.sqrt(m2 / (n - 1) / n) if n > 1 else math.inf, n)


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
    include_provisional: bool = False,
    decision_ids: Collection[str] | None = None,
    logged_by: str | Collection[str] | None = None,
    invocation: Mapping[str, Any] | None = None,
) -> tuple[LogEvaluation, ...]:
    """Estimate every target's value on the rewarded decisions between ``since`` and ``until``
    (``[since, until)``, timezone-aware): those with a final reward, and with
    ``include_provisional`` those whose reward may still change too; with ``decision_ids``, only
    the decisions it names (one segment of the traffic: decisions whose contexts do not depend on
    the policy, say); with ``logged_by``, only the decisions the policies it names logged (one
    bot's, on a log several share; a name that logged none is refused). ``seed`` seeds the reward model and the target's rollouts. The log of a bench
    run that did not finish (``memabra bench --log-db``, killed or stopped) is refused
    (:class:`~memabra.ConfigError`). ``invocation``: the command that asked for it, kept with the
    stored runs (``details.provenance``, :mod:`._run_record`) beside the seed and the settings."""
    check_alpha(alpha)
    check_seed(seed)
    check_window(since, until)
    only = check_decision_ids(decision_ids)
    policies = check_logged_by(logged_by)
    check_targets(targets)
    # a bench log whose run was killed reads like a whole one, and no report holds its truth
    refuse_unfinished_bench_log(log.engine)
    refuse_unlogged(log, policies)
    names = list(estimators)
    names.extend(name for name in RECOMMENDED_ORDER if name not in names)
    chosen = make_slot_estimators(names)

    provisional = 0
    # both passes read the log as of now, and must read the same decisions (._as_of)
    as_of = utcnow()
    read_until = pinned_until(until, as_of)
    fingerprints: list[ReadFingerprint] = []
    # the (reward version, stored weights) of every reward read, kept with the run: `ope online`
    # compares with these, since a `rewards recompute` re-totals the stored rewards in place later
    scales: set[tuple[str, tuple[tuple[str, float], ...]]] = set()

    def rewarded() -> Any:
        nonlocal provisional
        provisional = 0
        fingerprints.append(read := ReadFingerprint())
        for decision in read_decisions(log, since, read_until, policies):
            if decision.reward is None or (only is not None and decision.selection.id not in only):
                continue
            if changed_since(decision, as_of):
                continue
            if not _readable(decision, include_provisional):
                provisional += 1
                continue
            read.add(decision.selection.id)
            stored_weights = decision.reward.weights.as_dict()
            scales.add((decision.reward.version, tuple(sorted((k, float(v)) for k, v in stored_weights.items()))))
            yield decision.selection, _reward(decision.reward, weights), decision.used_ids

    model: SlateRewardModel | None = None
    report: RewardModelReport | None = None
    needs_model = any(name in NEEDS_REWARD_MODEL for name in names)
    if needs_model:
        model = SlateRewardModel(random_state=seed)
    additivity = AdditivityCheck(random_state=seed)
    total, squares, count = 0.0, 0.0, 0
    first_at: datetime | None = None
    last_at: datetime | None = None
    lowest, highest = math.inf, -math.inf
    for selection, reward, used_ids in rewarded():
        count += 1
        first_at = selection.created_at if first_at is None else min(first_at, selection.created_at)
        last_at = selection.created_at if last_at is None else max(last_at, selection.created_at)
        total += reward
        squares += reward * reward
        lowest, highest = min(lowest, reward), max(highest, reward)
        table = DecisionTable.of(selection)
        additivity.observe(selection, reward, table, used_ids, count - 1)
        if model is not None:
            model.observe(selection, reward, table, count - 1)
    if count == 0:
        raise nothing_read(log, since, until, include_provisional, provisional, only, policies)
    if model is not None:
        report = model.fit()
    additive = additivity.fit(alpha)
    # per target, per replay (set-equivalent, own order): the estimators' moments, weights, floors
    streams = [[[StreamingEstimate(e) for e in chosen] for _ in _REPLAYS] for _ in targets]
    summaries = [[{name: WeightSummary() for name in WEIGHT_LABELS} for _ in _REPLAYS] for _ in targets]
    floors = [[0.0 for _ in _REPLAYS] for _ in targets]
    # one column per target, replay and paired term, then the logged reward: any two recommendations
    # (or one and the logging policy) get a paired difference (._paired), and the bias tests theirs
    paired_estimators = make_slot_estimators(_PAIRED)
    paired = PairedMoments(len(targets) * len(_REPLAYS) * len(_COLUMNS) + 1)

    def column(t: int, r: int, term: str) -> int:
        return (t * len(_REPLAYS) + r) * len(_COLUMNS) + _COLUMNS.index(term)

    def fold_in(chunk: list[tuple[Selection, float]], start: int) -> None:
        rows = RowBatch(model)
        contexts = [
            DecisionContext.of(selection, reward, rows, start + i) for i, (selection, reward) in enumerate(chunk)
        ]
        pending = [
            [
                decision_terms(c, target.router, rows, seed=rollout_seed(seed, start + i), model=model is not None)
                for i, c in enumerate(contexts)
            ]
            for target in targets
        ]
        rows.run()
        columns = np.empty((len(chunk), paired.n_columns))
        columns[:, -1] = [reward for _, reward in chunk]
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
                for estimator in paired_estimators:
                    columns[:, column(t, r, estimator.estimator_name)] = estimator.round_components(batch)[:, 0]
                columns[:, column(t, r, _SLOT_SUM)] = batch.independent_baseline
        paired.update(columns)

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
    fingerprints[1].check_same(fingerprints[0])
    out: list[LogEvaluation] = []
    logging_value = total / count
    logging_stderr = (
        math.sqrt(max(squares - count * logging_value**2, 0.0) / (count - 1) / count) if count > 1 else math.inf
    )
    # what a target's unreached share could have earned: anything the reward allows, or the log held
    allowed = (weights or RewardWeights()).total_range()
    reward_range = (min(allowed[0], lowest), max(allowed[1], highest))
    picked: list[int] = []
    for t, target in enumerate(targets):
        r = pick_replay(summaries[t], [f / count for f in floors[t]], alpha)
        picked.append(r)
        out.append(
            summarise(
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
                [(_REPLAYS[o], summaries[t][o]["joint_weight"]) for o in range(len(_REPLAYS)) if o != r],
                {name: paired.difference(column(t, r, "cdr"), column(t, r, name), alpha) for name in GAP_ESTIMATORS},
                paired.difference(column(t, r, _SLOT_SUM), column(t, r, "dm"), alpha),
            )
        )
    # paired differences only between supported recommendations: an unsupported one's bounds already
    # say all the log can about it. Each side's unreached share widens the difference as it widens
    # that side's own interval (the logged mean reached everything it averages)
    own = [column(t, picked[t], ev.recommended.estimator) for t, ev in enumerate(out)]
    span = reward_range[1] - reward_range[0]

    def versus(t: int) -> dict[str, PolicyValueInterval]:
        mine = out[t].unreached_share
        return {
            **{
                other.policy: widen(paired.difference(own[t], own[u], alpha), (mine + other.unreached_share) * span)
                for u, other in enumerate(out)
                if u != t and other.policy != out[t].policy and other.recommended.supported
            },
            LOGGING_POLICY: widen(paired.difference(own[t], paired.n_columns - 1, alpha), mine * span),
        }

    # kept with every stored row: what was compared, and how the run was made, to read and rerun later
    names_of = [target.policy for target in targets]
    made = provenance(seed, alpha, include_provisional, names, names_of, invocation)

    def stored(ev: LogEvaluation, paired_with: dict[str, PolicyValueInterval]) -> LogEvaluation:
        results = with_window(ev.results, since, until, as_of, first_at, last_at, only, policies)
        results = with_run_record(
            results, paired_with, logging_value, logging_stderr, alpha, made, [(v, dict(w)) for v, w in scales]
        )
        return replace(
            ev,
            versus=paired_with,
            logging_stderr=logging_stderr,
            n_provisional=provisional,
            results=results,
            provenance=made,
        )

    return tuple(stored(ev, versus(t) if ev.recommended.supported else {}) for t, ev in enumerate(out))


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
    include_provisional: bool = False,
    decision_ids: Collection[str] | None = None,
    logged_by: str | Collection[str] | None = None,
    invocation: Mapping[str, Any] | None = None,
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
        include_provisional=include_provisional,
        decision_ids=decision_ids,
        logged_by=logged_by,
        invocation=invocation,
    )[0]
