"""What ``ope online`` compares besides the numbers: whose traffic each side is, and on what reward
scale (:mod:`._online`).

Whose traffic. A snapshot is served only by routers of its own policy (``restore`` refuses
another's), so every online decision of snapshot ``V`` was logged by ``V``'s policy. Several bots
sharing one log each route under their own policy name, so the run's offline estimate is of the
same traffic only when the decisions it read were that policy's, or logged by the router that
policy replaced on the same bot. A run made with ``--logged-by`` recorded the policies it read; one
without read every policy's decisions in its window, which the log still tells (a log with one
bot's traffic reads one policy). The check says which on each side and, where they differ, how to
make a run of like traffic.

Reward scale. The run recorded the (reward version, weights) pairs of the rewards it read
(``details.reward_scales``, :func:`~memabra.evals.offline._run_record.reward_scales_json`); a run
stored before it did is read from the log now, which ``memabra rewards recompute`` may have
re-totalled since (the way docs/configuration.md changes the weights): the check then says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memabra._records import OPEResult, RewardWeights
from memabra._records_offline import weight_number as _number
from memabra.storage import EpisodeLog
from memabra.storage._offline import logged_policies, reward_settings

__all__ = ["RewardScale", "read_scales", "reward_notes", "run_read_by", "stored_time", "traffic_notes"]

# (reward version, the weights as sorted (name, value) pairs): one way a stored total was computed
RewardScale = tuple[str, tuple[tuple[str, float], ...]]


def stored_time(value: Any) -> datetime | None:
    """A stored window's time; one that does not parse reads as not recorded (not a traceback),
    one without a zone as the UTC the log stores."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _window(run: OPEResult) -> Mapping[str, Any]:
    window = run.details.get("window")
    return window if isinstance(window, Mapping) else {}


def run_read_by(log: EpisodeLog, run: OPEResult) -> tuple[tuple[str, ...], bool]:
    """The policies whose decisions the run read, and whether it chose them (``--logged-by``)
    rather than reading every policy's: then the log's policies with a rewarded decision in the
    run's window (empty when the window is not recorded or its decisions are gone)."""
    window = _window(run)
    chosen = window.get("logged_by")
    if isinstance(chosen, list) and chosen:
        return tuple(sorted(str(name) for name in chosen)), True
    first, last = stored_time(window.get("first_decision_at")), stored_time(window.get("last_decision_at"))
    if first is None or last is None:
        return (), False
    # one query per policy the log holds: a log holds a few bots, not thousands
    tx = log.transactions
    return tuple(p for p in logged_policies(tx) if reward_settings(tx, first, last, [p])), False


def traffic_notes(version: str, served_by: str | None, read_by: tuple[str, ...], chosen: bool) -> list[str]:
    """Why the two sides may be different traffic: the run read other policies' decisions than the
    one that served ``version``. Empty when they are the same policy's."""
    if served_by is None or not read_by or read_by == (served_by,):
        return []
    rerun = f"ope log --logged-by {served_by} --policy snapshot:{version} on the decisions {served_by} logged"
    names = ", ".join(read_by)
    if not chosen and len(read_by) > 1:
        return [
            f"not like with like: the run read every policy's decisions in its window ({names}), so its estimate "
            f"is {version}'s value on all their traffic together, while online {version} served {served_by}'s "
            f"traffic only (each bot routes under its own policy): for a check of like traffic, run {rerun}, "
            "and check that run"
        ]
    return [
        f"the run read decisions logged by {names}; online, {version} was served by {served_by}: like with like "
        f"only if {served_by} now serves the traffic {names} served (the same bot with a new router), not if "
        f"{'they are other bots' if len(read_by) > 1 else 'it is another bot'} (then run {rerun})"
    ]


def read_scales(log: EpisodeLog, run: OPEResult) -> tuple[set[RewardScale] | None, bool]:
    """The reward scales of the rewards the run read, and whether the run recorded them (else
    they are read from the log now). ``None``: neither tells (no recorded window, or its decisions
    are gone from the log)."""
    recorded = run.details.get("reward_scales")
    if isinstance(recorded, list) and recorded:
        scales = {_scale(item) for item in recorded}
        if None not in scales:
            return {s for s in scales if s is not None}, True
    window = _window(run)
    first, last = stored_time(window.get("first_decision_at")), stored_time(window.get("last_decision_at"))
    if first is None or last is None:
        return None, False
    logged_by = window.get("logged_by")
    found = reward_settings(log.transactions, first, last, logged_by if isinstance(logged_by, list) else None)
    # the stored JSON as written, which may leave out a weight at its default: compared as the
    # online side reads its rewards (RewardWeights), so a left-out default is no difference
    scales = {_scale({"version": version, "weights": dict(weights)}) for version, weights in found}
    return {s for s in scales if s is not None} or None, False


def _scale(item: Any) -> RewardScale | None:
    """A recorded (reward version, weights) as the online rewards are read: every weight, a
    left-out one at its default. ``None`` for one that makes no valid weights (an unknown name, a
    negative or non-numeric value): it cannot be compared, nor printed as weights."""
    if not isinstance(item, Mapping) or not isinstance(item.get("version"), str):
        return None
    weights = item.get("weights")
    if not isinstance(weights, Mapping):
        return None
    try:
        full = RewardWeights(**{str(k): v for k, v in weights.items()}).as_dict()
    except (TypeError, ValueError):  # InvalidRecordError is a ValueError
        return None
    return str(item["version"]), tuple(sorted(full.items()))


def _weights_of(scale: RewardScale) -> str:
    return " ".join(f"{k}={_number(v)}" for k, v in RewardWeights(**dict(scale[1])).as_dict().items())


def reward_notes(log: EpisodeLog, run: OPEResult, online: set[RewardScale], rescored: bool) -> tuple[list[str], str]:
    """What differs between the rewards the run read and the online ones (the reward version, how
    the components were computed, always; the weights unless both are re-scored under the run's
    ``--weights``), each a reason to refuse; and a caveat that refuses nothing: where the run's
    scale was read from the log now rather than from its record."""
    offline, recorded = read_scales(log, run)
    if offline is None:
        return [
            "the decisions the run read are not in the log any more (or it did not record which it read), so the "
            "reward version and weights it scored under cannot be checked"
        ], ""
    kept = "reward_scales" in run.details
    caveat = (
        ""
        if recorded
        else (
            "the reward scale the run recorded makes no valid weights"
            if kept
            else "the run did not record the reward scale it read"
        )
        + ": its rewards' version and weights were read from the log now, and a `memabra rewards recompute` "
        "since the run would have changed them unseen"
    )
    notes = []
    versions_off, versions_on = {v for v, _ in offline}, {v for v, _ in online}
    if versions_off != versions_on:
        notes.append(
            f"reward version differs: the run read rewards of version {', '.join(sorted(versions_off))}, "
            f"the online decisions have {', '.join(sorted(versions_on))}"
        )
    weights_off, weights_on = {w for _, w in offline}, {w for _, w in online}
    if not rescored and weights_off != weights_on:
        notes.append(
            f"reward weights differ: the run scored under {'; '.join(sorted(_weights_of(s) for s in offline))}, "
            f"the online rewards under {'; '.join(sorted(_weights_of(s) for s in online))} (rerun ope log with "
            "--weights set to the online ones on the same decisions and check that run)"
        )
    return notes, caveat
