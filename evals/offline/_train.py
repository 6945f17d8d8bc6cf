"""Off-policy training from the episode log, gated by offline evaluation.

The log is split in time: decisions before the split train a fresh learner from their logged
propensities (:meth:`Router.learn_logged`); decisions after it evaluate the result against the
logging policy. The gate reads the evaluation's ``recommended`` estimate: the new policy is saved
as a snapshot only when that estimate is supported (:mod:`memabra.evals.offline._support`) and
the lower end of the ``1 - alpha`` interval of its difference from the logging policy, paired on
the same held-out decisions (:mod:`memabra.evals.offline._paired`), is above 0 (or when forced):
the logging policy's own mean is an estimate too, and pairing keeps the decisions where both
would have done the same from adding noise to the comparison; the verdict, the estimate and the split are stored with the
snapshot's metrics and every estimate in the log's OPE results. Like the online learner, it
trains and evaluates on final rewards only unless ``include_provisional``. With ``logged_by``, the
split, the training and the evaluation read only the decisions those policies logged (one bot's,
on a log several bots share), and the snapshot's metrics say so.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from memabra._errors import ConfigError, InvalidRecordError, RouterError
from memabra._records import LoggedDecision, OPEResult, PolicySnapshot, RewardWeights
from memabra.evals.offline._evaluate import (
    LOGGING_POLICY,
    LogEvaluation,
    check_window,
    evaluate_on_log,
)
from memabra.evals.offline._inputs import check_logged_by
from memabra.evals.offline._logged_by import described, read_decisions, refuse_unlogged, rewarded_count
from memabra.evals.offline._policies import ROUTER_ALIASES, ROUTERS
from memabra.evals.offline._run_record import recordable
from memabra.evals.ope import PolicyValueInterval
from memabra.storage import EpisodeLog, unused_snapshot_version
from memabra.storage._offline import rewarded_time_at
from memabra.storage._snapshots import SnapshotExistsError

__all__ = ["TrainReport", "train_from_log"]

# Names tried for a candidate whose chosen name another training run took meanwhile: each try
# takes the next free one, so only runs finishing within the same instant ever need a second.
_VERSION_TRIES = 5

logger = logging.getLogger("memabra")


@dataclass(frozen=True, slots=True)
class TrainReport:
    learner: str
    n_train: int
    n_holdout: int
    split_at: datetime
    estimate: OPEResult
    supported: bool
    reason: str
    logging_value: float
    logging_stderr: float
    promotable: bool
    saved_version: str | None
    evaluation: LogEvaluation
    # the new policy minus the logging policy on the held-out decisions, paired; None where unsupported
    improvement: PolicyValueInterval | None = None
    # the policies whose decisions alone it trained and evaluated on (None: every policy's)
    logged_by: frozenset[str] | None = None


def _usable(decision: LoggedDecision, include_provisional: bool) -> bool:
    return decision.reward is not None and (decision.final or include_provisional)


def _split_time(
    log: EpisodeLog,
    since: datetime | None,
    holdout: float,
    include_provisional: bool,
    logged_by: frozenset[str] | None,
) -> tuple[datetime, int, int]:
    # two SQL queries, not a pass that rebuilds every decision to read its time
    n = rewarded_count(log, since, include_provisional, logged_by)
    if n < 10:
        kind = "rewarded" if include_provisional else "finally rewarded"
        window = f" since {since.isoformat()}" if since is not None else ""
        pending = 0 if include_provisional else rewarded_count(log, since, True, logged_by) - n
        hint = (
            f" ({pending} more {'has' if pending == 1 else 'have'} a provisional reward only: "
            "include_provisional=True, or --include-provisional, trains on them too)"
            if pending
            else ""
        )
        raise InvalidRecordError(
            f"the episode log holds {n} {kind} decisions{described(logged_by)}{window}; "
            f"off-policy training needs at least 10{hint}"
        )
    k = min(n - 1, max(1, int(round(n * (1.0 - holdout)))))
    return rewarded_time_at(log.transactions, k, since, include_provisional, logged_by), k, n - k


def train_from_log(
    log: EpisodeLog,
    *,
    learner: str = "linear",
    learner_args: Mapping[str, Any] | None = None,
    since: datetime | None = None,
    holdout: float = 0.2,
    alpha: float = 0.05,
    weights: RewardWeights | None = None,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
    include_provisional: bool = False,
    logged_by: str | Collection[str] | None = None,
    invocation: Mapping[str, Any] | None = None,
) -> TrainReport:
    learner = ROUTER_ALIASES.get(learner, learner)
    if learner not in ROUTERS:
        raise ConfigError(f"unknown learner {learner!r}; choose from {', '.join(sorted(ROUTERS))}")
    if not 0.0 < holdout < 1.0:
        raise ConfigError(f"holdout must lie strictly between 0 and 1, got {holdout}")
    check_window(since, None)
    policies = check_logged_by(logged_by)
    refuse_unlogged(log, policies)
    split_at, _, _ = _split_time(log, since, holdout, include_provisional, policies)
    try:
        router = ROUTERS[learner](**dict(learner_args or {}))
        # a router checks its arguments when it first builds its state: before the pass over the log
        _ = router.policy_version
    except (TypeError, RouterError) as exc:
        raise ConfigError(f"bad arguments for learner {learner!r}: {exc}") from None
    # what it trained on is what it read: decisions sharing the split's instant fall to the held-out
    # side, and on a live log rewards finalised since the count are read too
    n_train = 0
    for i, decision in enumerate(read_decisions(log, since, split_at, policies)):
        reward = decision.reward
        if reward is None or not _usable(decision, include_provisional):
            continue
        router.learn_logged(decision.selection, reward.reweighted(weights) if weights is not None else reward)
        n_train += 1
        if progress is not None:
            progress(i + 1)
    if n_train == 0:
        raise InvalidRecordError(
            f"no rewarded decision{described(policies)} precedes the split at {split_at.isoformat()}: "
            "the decisions before it share its instant, so nothing is left to train on (log more, or lower holdout)"
        )
    evaluation = evaluate_on_log(
        log,
        router,
        policy=f"{learner} (trained from log)",
        since=split_at,
        weights=weights,
        alpha=alpha,
        include_provisional=include_provisional,
        logged_by=policies,
        invocation=invocation,
    )
    recommended = evaluation.recommended
    if not math.isfinite(recommended.value):
        raise InvalidRecordError(
            f"{recommended.estimator} is undefined on the held-out decisions: {recommended.reason}"
        )
    estimate = next(r for r in evaluation.results if r.estimator == recommended.estimator)
    # the logging policy's value on the very decisions the estimate read: on a log still being
    # written, a second pass would read more of them
    value, stderr = evaluation.logging_value, evaluation.logging_stderr
    n_holdout = evaluation.n_rounds
    improvement = evaluation.versus.get(LOGGING_POLICY)  # present exactly when supported
    promotable = improvement is not None and math.isfinite(improvement.ci_low) and improvement.ci_low > 0.0
    if not recommended.supported:
        verdict = f"unsupported: {recommended.reason}"
    elif promotable:
        verdict = "beats logging policy"
    else:
        verdict = "does not beat logging policy"
    candidate: PolicySnapshot | None = None
    trained_as = ""  # the version the trained router names itself, which the saved name derives from
    if promotable or force:
        snapshot = router.snapshot()
        # its own policy's: a rollback of it re-activates a snapshot of the same policy
        active = log.latest_snapshot(snapshot.policy, status="active")
        metrics = {
            "verdict": verdict if promotable else f"forced: {verdict}",
            "estimator": recommended.estimator,
            "supported": recommended.supported,
            "estimate": estimate.value,
            "ci_low": estimate.ci_low,
            "ci_high": estimate.ci_high,
            "logging_value": value,
            "improvement": None if improvement is None else improvement.value,
            "improvement_ci_low": None if improvement is None else improvement.ci_low,
            "improvement_ci_high": None if improvement is None else improvement.ci_high,
            "n_train": n_train,
            "n_holdout": n_holdout,
            "split_at": split_at.isoformat(),
        }
        if policies is not None:  # trained on those policies' decisions only, not the whole log
            metrics["logged_by"] = sorted(policies)
        # trained apart from the online lineage, it may reach the same "root+n" as a model whose
        # decisions are logged: a fresh name keeps the log from attributing those to this one
        trained_as = snapshot.version
        candidate = replace(
            snapshot,
            version=unused_snapshot_version(log, trained_as),
            parent=active.version if active else None,
            metrics=metrics,
            status="candidate",
        )
    for attempt in range(1, _VERSION_TRIES + 1):
        saved = None if candidate is None else candidate.version
        # what was trained, kept with the run that judged it whether or not a snapshot was saved
        training = {
            "learner": learner,
            # as JSON can hold it (an argument of another type, a callable or an array, by its
            # text) and with secrets masked (a key naming one, a URL's password): anyone reads runs
            "learner_args": recordable(dict(learner_args or {})),
            "holdout": holdout,
            "split_at": split_at.isoformat(),
            "n_train": n_train,
        }
        results = [
            replace(r, snapshot_version=saved, details={**r.details, "training": training}) for r in evaluation.results
        ]
        try:
            # one transaction: a crash between two writes would keep a snapshot without the run that judged it
            log.record_ope_results(results, snapshot=candidate)
            break
        except SnapshotExistsError:
            if candidate is None or attempt == _VERSION_TRIES:
                raise
            # another training run took the name since it was chosen: the next free one
            candidate = replace(candidate, version=unused_snapshot_version(log, trained_as))
    estimate = next(r for r in results if r.estimator == recommended.estimator)
    if candidate is not None:
        logger.info("saved snapshot %s (%s)", saved, candidate.metrics["verdict"])
    return TrainReport(
        learner=learner,
        n_train=n_train,
        n_holdout=n_holdout,
        split_at=split_at,
        estimate=estimate,
        supported=recommended.supported,
        reason=recommended.reason,
        logging_value=value,
        logging_stderr=stderr,
        promotable=promotable,
        saved_version=saved,
        evaluation=evaluation,
        improvement=improvement,
        logged_by=policies,
    )
