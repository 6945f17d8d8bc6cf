"""Did the offline estimate come true? A stored OPE run's estimate of a snapshot, set against
the mean final reward of the decisions that snapshot served once promoted.

The online decisions are those whose logged policy version grew from the run's snapshot ``V``
(``V`` itself and its online updates ``V+1``, ``V+2``, ... up to the next saved snapshot:
:func:`~memabra.storage.snapshot_group`, the rule the policies page counts by), made in the window
asked for (by default after the run was made: a decision it could have read is not a check of it),
with a final reward. Their mean gets the interval the offline estimate got: normal, at the run's
level, from the sample's standard error, on the same reward scale (re-scored under the run's
``--weights`` when it had them). The difference online minus offline is of two independent
estimates; its interval combines the two intervals' half-widths on each side (the square root of
their squares' sum, which for two symmetric normal intervals is the normal interval of the
difference, and which keeps an offline interval widened on one side so).

Like with like: the offline target is ``V``'s own stochastic policy, its exploration (ε, the
reference share) included, as agents serving ``V`` drew from it; decisions of online updates of
``V`` come from a policy that has moved since, and are counted apart (``unchanged_only`` keeps
only ``V``'s own). Only ``V``'s policy serves ``V``: where the run read other policies' decisions
(another bot's, or every bot's on a shared log) the check says so first (:mod:`._online_like`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from statistics import NormalDist
from typing import Any

from memabra._errors import ConfigError, InvalidRecordError, UnknownEpisodeError
from memabra._records import OPEResult, PolicySnapshot, RewardWeights
from memabra.evals.offline._online_like import RewardScale, reward_notes, run_read_by, traffic_notes
from memabra.evals.offline._online_like import stored_time as _time
from memabra.storage import EpisodeLog
from memabra.storage._offline import ServedReward, ope_run_rows, served_rewards

__all__ = ["MIN_ONLINE_DECISIONS", "CheckedInterval", "OnlineCheck", "check_online"]

# Fewer final rewards than this and no verdict is given: the online interval is the normal one
# (as the offline one), whose coverage on the mean of a bounded, often two-valued reward (a hit or
# a miss) falls well below its level on a few dozen decisions; 30 is where that approximation is
# conventionally taken to hold, and a verdict on fewer would be read as evidence it is not.
MIN_ONLINE_DECISIONS = 30


@dataclass(frozen=True, slots=True)
class CheckedInterval:
    """One side of the check (the offline estimate, the online mean or their difference) with its
    two-sided interval at the run's level."""

    value: float
    ci_low: float
    ci_high: float

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high}


@dataclass(frozen=True, slots=True)
class OnlineCheck:
    """A stored run's offline estimate against what its snapshot earned online."""

    run_id: str
    policy: str
    snapshot_version: str
    estimator: str
    supported: bool | None
    alpha: float
    offline: CheckedInterval
    online: CheckedInterval
    online_stderr: float
    difference: CheckedInterval
    inside: bool  # the online mean lies in the offline interval
    n_offline: int  # decisions the run's estimate rests on
    n_online: int  # decisions with a final reward the online mean rests on
    n_unchanged: int  # of them, made by the snapshot itself (not an online update of it)
    n_pending: int  # decisions served in the window whose reward is not final yet
    since: datetime | None
    until: datetime | None
    first_decision_at: datetime
    last_decision_at: datetime
    weights: dict[str, float] | None  # the run's --weights the online rewards were re-scored under
    unchanged_only: bool
    served_by: str | None  # the policy (the bot's router) that served the snapshot; None: snapshot pruned
    run_read_by: tuple[str, ...]  # the policies whose decisions the run read (empty: not known)
    run_chose_policies: bool  # the run read only those (--logged-by), not every policy's decisions
    verdict: str
    notes: tuple[str, ...] = field(default=())

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "policy": self.policy,
            "snapshot_version": self.snapshot_version,
            "estimator": self.estimator,
            "supported": self.supported,
            "alpha": self.alpha,
            "ci_method": "normal",
            "offline": self.offline.as_dict(),
            "online": {**self.online.as_dict(), "stderr": self.online_stderr},
            "difference": self.difference.as_dict(),
            "online_inside_offline_interval": self.inside,
            "n_offline": self.n_offline,
            "n_online": self.n_online,
            "n_unchanged": self.n_unchanged,
            "n_pending": self.n_pending,
            "unchanged_only": self.unchanged_only,
            "window": {
                "since": None if self.since is None else self.since.isoformat(),
                "until": None if self.until is None else self.until.isoformat(),
                "first_decision_at": self.first_decision_at.isoformat(),
                "last_decision_at": self.last_decision_at.isoformat(),
            },
            "weights": self.weights,
            "served_by": self.served_by,
            "run_read": {"logged_by": list(self.run_read_by), "chosen": self.run_chose_policies},
            "verdict": self.verdict,
            "notes": list(self.notes),
        }


def _headline(rows: list[OPEResult]) -> OPEResult:
    recommended = [r for r in rows if r.details.get("recommended") is True]
    return recommended[0] if recommended else min(rows, key=lambda r: r.created_at)


def check_online(
    log: EpisodeLog,
    run_id: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    unchanged_only: bool = False,
    allow_reward_change: bool = False,
) -> OnlineCheck:
    """Set stored run ``run_id``'s recommended estimate (whole id or a prefix) against the mean
    final reward of the decisions its snapshot served in ``[since, until)`` (``since`` defaults
    to when the run was made). Refused (:class:`~memabra.ConfigError`): a run of no snapshot,
    fewer than :data:`MIN_ONLINE_DECISIONS` final rewards, or rewards of another reward version or
    weighting than the run read, unless ``allow_reward_change`` (the check then says so)."""
    try:
        rows = ope_run_rows(log.transactions, run_id)
    except InvalidRecordError as exc:
        raise ConfigError(str(exc)) from None
    run = _headline(rows)
    if run.snapshot_version is None:
        raise ConfigError(
            f"run {run.run_id[:8]} evaluated {run.policy!r}, not a saved snapshot: only a snapshot's served "
            "decisions can be found in the log (evaluate snapshot:VERSION, or train --from-log)"
        )
    version = run.snapshot_version
    start = since if since is not None else run.created_at
    weights = run.reward_weights
    rescore = RewardWeights(**weights) if weights is not None else None
    n, mean, m2, pending, unchanged = 0, 0.0, 0.0, 0, 0
    first_at: datetime | None = None
    last_at: datetime | None = None
    settings: set[RewardScale] = set()
    decision: ServedReward
    for decision in served_rewards(log.transactions, version, start, until):
        if unchanged_only and decision.policy_version != version:
            continue
        if decision.reward is None or not decision.final:
            pending += 1
            continue
        reward = decision.reward
        settings.add((reward.version, tuple(sorted(reward.weights.as_dict().items()))))
        x = (reward.reweighted(rescore) if rescore is not None else reward).total
        n += 1
        delta = x - mean
        mean += delta / n
        m2 += delta * (x - mean)
        unchanged += decision.policy_version == version
        # served_rewards is in time order within each batch of versions, not across them
        first_at = decision.created_at if first_at is None else min(first_at, decision.created_at)
        last_at = decision.created_at if last_at is None else max(last_at, decision.created_at)
    which = f"snapshot {version}" + (" itself (not its online updates)" if unchanged_only else "")
    if n < MIN_ONLINE_DECISIONS or first_at is None or last_at is None:
        later = f"; {pending} more await a final reward" if pending else ""
        raise ConfigError(
            f"{which} served {n} decision(s) with a final reward since {start.isoformat()}"
            f"{'' if until is None else ' until ' + until.isoformat()}{later}: at least {MIN_ONLINE_DECISIONS} "
            "are needed for the online interval to mean what it says; check again when more feedback is final"
        )
    notes, scale_caveat = reward_notes(log, run, settings, rescored=rescore is not None)
    if notes and not allow_reward_change:
        raise ConfigError(
            "the online rewards are not on the offline run's scale: "
            + "; ".join(notes)
            + " (--allow-reward-change compares them anyway)"
        )
    alpha = run.alpha
    z = NormalDist().inv_cdf(1 - alpha / 2)
    stderr = math.sqrt(m2 / (n - 1) / n)
    online = CheckedInterval(mean, mean - z * stderr, mean + z * stderr)
    offline = CheckedInterval(run.value, run.ci_low, run.ci_high)
    d = online.value - offline.value
    # two independent estimates: each side's half-widths in quadrature (MOVER; normal when symmetric)
    low = d - math.hypot(online.value - online.ci_low, offline.ci_high - offline.value)
    high = d + math.hypot(online.ci_high - online.value, offline.value - offline.ci_low)
    difference = CheckedInterval(d, low, high)
    inside = offline.ci_low <= online.value <= offline.ci_high
    notes = [f"accepted though {note}" for note in notes]
    snapshot = _snapshot(log, version)
    served_by = None if snapshot is None else snapshot.policy
    read_by, chosen = run_read_by(log, run)
    # first: a check of other traffic is the first thing to read, before any figure's caveat
    notes[:0] = traffic_notes(version, served_by, read_by, chosen)
    if scale_caveat:
        notes.append(scale_caveat)
    notes.extend(_like_with_like(snapshot, version, n, unchanged, unchanged_only))
    supported = run.details.get("supported")
    if supported is False:
        notes.append(
            "the offline estimate was unsupported by its log: its interval is bounds on what the log could say, "
            "not an estimate's"
        )
    window = run.details.get("window")
    last_read = _time(window.get("last_decision_at")) if isinstance(window, dict) else None
    if last_read is not None and first_at <= last_read:
        notes.append(
            f"some online decisions are at or before {last_read.isoformat()}, the last the run read: "
            "the run may have read them, so they are not an independent check"
        )
    return OnlineCheck(
        run_id=run.run_id,
        policy=run.policy,
        snapshot_version=version,
        estimator=run.estimator,
        supported=supported if isinstance(supported, bool) else None,
        alpha=alpha,
        offline=offline,
        online=online,
        online_stderr=stderr,
        difference=difference,
        inside=inside,
        n_offline=run.n_rounds,
        n_online=n,
        n_unchanged=unchanged,
        n_pending=pending,
        since=start,
        until=until,
        first_decision_at=first_at,
        last_decision_at=last_at,
        weights=None if weights is None else dict(weights),
        unchanged_only=unchanged_only,
        served_by=served_by,
        run_read_by=read_by,
        run_chose_policies=chosen,
        verdict=_verdict(difference, inside, alpha, supported is False),
        notes=tuple(notes),
    )


def _verdict(difference: CheckedInterval, inside: bool, alpha: float, unsupported: bool) -> str:
    level = f"{round(100 * (1 - alpha), 10):g}%"
    if difference.ci_low > 0:
        return f"did not come true: online the snapshot did better than estimated ({level} interval of the difference above 0)"
    if difference.ci_high < 0:
        return f"did not come true: online the snapshot did worse than estimated ({level} interval of the difference below 0)"
    if unsupported:
        # an unsupported run's interval is the bounds of what its log could not rule out (often most
        # of the reward's range): a mean inside them confirms no estimate, there being none
        where = "inside" if inside else "outside, though within the two samples' noise of,"
        return (
            f"no verdict: the offline run was unsupported, and the online mean lies {where} its bounds, which "
            "say only what the log could not rule out (a supported run of this snapshot can be checked)"
        )
    if inside:
        return "came true: the online mean lies inside the offline interval"
    return (
        "consistent, though the online mean lies outside the offline interval: the difference is within "
        "what the two samples' noise allows"
    )


def _snapshot(log: EpisodeLog, version: str) -> PolicySnapshot | None:
    try:
        return log.get_snapshot(version)
    except UnknownEpisodeError:  # pruned since its decisions were served
        return None


def _like_with_like(
    snapshot: PolicySnapshot | None, version: str, n: int, unchanged: int, unchanged_only: bool
) -> list[str]:
    """Whether the online decisions were drawn from the policy the run evaluated."""
    args = {} if snapshot is None else dict(snapshot.learner_args)
    exploration = ", ".join(f"{k}={args[k]}" for k in ("exploration", "epsilon", "top_m") if k in args)
    notes = [
        f"the offline target was {version}'s own stochastic policy, its exploration included"
        + (f" ({exploration})" if exploration else "")
        + ", as the agents serving it drew from it: the online mean counts explored draws too"
    ]
    if not unchanged_only and unchanged < n:
        notes.append(
            f"{n - unchanged} of the {n} online decisions came from online updates of {version} "
            f"(the later versions of its lineage, up to the next saved snapshot), a policy that has learned since "
            f"the run; {unchanged} from {version} itself "
            "(--unchanged-only compares those alone)"
        )
    return notes
