"""The log's status as Prometheus metrics: the text exposition format (version 0.0.4) that
``memabra status --prometheus FILE`` writes for node_exporter's textfile collector and the admin
serves at ``GET /metrics``.

The figures are :meth:`EpisodeLog.status <memabra.storage.EpisodeLog.status>`'s and the checks
:func:`memabra._health.health_problems`'; nothing here reads the database. The metric names are an
interface (alerts and dashboards key on them): docs/production.md lists each one. Ages are seconds
at the status read (0 when nothing waits, so ``> threshold`` alerts need no ``absent()``), and a
health check is a 0/1 series that is there on every successful read, failing or not.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal

from memabra._health import (
    DELETIONS_CHECK,
    ENCODER_CHECK,
    FEEDBACK_WINDOWS_CHECK,
    LEARNER_CHECK,
    TURNS_CHECK,
    HealthProblem,
    format_age,
)
from memabra._prometheus_text import CONTENT_TYPE, Labels, MetricFamily, render_families
from memabra._write_check import WRITES_CHECK
from memabra.storage import LogStatus, head_revision
from memabra.storage import _status_counts as caps

__all__ = ["CONTENT_TYPE", "MetricFamily", "render_families", "status_families", "status_metrics"]


def status_metrics(
    state: LogStatus | None,
    *,
    problems: Sequence[HealthProblem] = (),
    max_lag: timedelta,
    duration_s: float,
    checked_at: datetime,
    checked_policies: Collection[str] | None = None,
    writes_checked: bool = False,
    encoder_checked: bool = False,
) -> str:
    """The exposition text of one status check; ``state`` ``None``: the check could not run
    (``memabra_status_up 0`` and the check's own figures only). ``checked_policies``: the
    policies whose learner was checked (every one when ``None``), as ``health_problems`` got them.
    ``writes_checked``: the ``writes`` check ran (``memabra status`` runs it; a series saying 0
    where it did not would claim a check nobody made); ``encoder_checked`` likewise for the
    ``encoder`` check (the embedding-model setting names a usable model), which only
    ``memabra status`` runs: the admin's process reads no such setting."""
    return render_families(
        status_families(
            state,
            problems=problems,
            max_lag=max_lag,
            duration_s=duration_s,
            checked_at=checked_at,
            checked_policies=checked_policies,
            writes_checked=writes_checked,
            encoder_checked=encoder_checked,
        )
    )


def status_families(
    state: LogStatus | None,
    *,
    problems: Sequence[HealthProblem] = (),
    max_lag: timedelta,
    duration_s: float,
    checked_at: datetime,
    checked_policies: Collection[str] | None = None,
    writes_checked: bool = False,
    encoder_checked: bool = False,
) -> tuple[MetricFamily, ...]:
    """:func:`status_metrics`' families, before they are written out."""
    families = [
        _one(
            "memabra_status_up",
            "1 when the status check read the log, 0 when it could not",
            1 if state is not None else 0,
        ),
        _one("memabra_status_duration_seconds", "How long the status check took", duration_s),
        _one(
            "memabra_status_timestamp_seconds",
            "When the status check ran, in Unix time (a stale textfile shows here)",
            checked_at.timestamp(),
        ),
        _one("memabra_status_max_lag_seconds", "How long a reward may wait before a check fails", _s(max_lag)),
    ]
    if state is None:
        return tuple(families)
    now = state.checked_at
    families += [
        _one("memabra_status_healthy", "1 when no health check failed", 0 if problems else 1),
        _family(
            "memabra_health_problem",
            "1 when this health check fails (check: feedback_windows, learner, deletions, turns, and writes "
            "where memabra status checked that the database takes writes: a hot standby, read-only "
            "transactions, a SQLite file or folder its writers cannot write, a volume nearly full; and encoder "
            "where it checked that the embedding-model setting names a model the agent can load)",
            _problem_samples(state, problems, checked_policies, writes_checked, encoder_checked),
        ),
        _family(
            "memabra_log_info",
            "The log's database backend and schema revision (always 1)",
            [((("backend", state.backend), ("schema_revision", state.schema_revision or "")), 1)],
        ),
        _one(
            "memabra_schema_current",
            "1 when the log's schema is at this memabra's revision",
            1 if state.schema_revision == head_revision() else 0,
        ),
        _one(
            "memabra_episodes",
            f"Episodes in the log: counted up to {caps.EPISODES_COUNT_CAP}, beyond that on PostgreSQL the planner's "
            "estimate (pg_class.reltuples), or that cap as a lower bound before the table was first analysed; "
            "memabra_episodes_exact says which (memabra status --exact counts them all)",
            state.episodes,
        ),
        _one(
            "memabra_episodes_exact",
            "1 when memabra_episodes was counted, 0 when it is an estimate or a lower bound",
            1 if state.episodes_accuracy == "exact" else 0,
        ),
        _family(
            "memabra_last_episode_age_seconds",
            "Time since the newest episode was logged",
            [] if state.last_episode_at is None else [((), _age(now, state.last_episode_at))],
        ),
        _one("memabra_feedback_windows_open", "Episodes whose reward is not final yet", state.open_windows),
        _one("memabra_feedback_windows_overdue", "Feedback windows past their end and not closed", state.overdue),
        _one(
            "memabra_feedback_windows_overdue_oldest_age_seconds",
            "Time since the earliest overdue feedback window ended (0: none)",
            _age(now, state.overdue_since),
        ),
        _one(
            "memabra_rewards_unlearned",
            f"Final rewards no learner has marked learned, counted up to {caps.BACKLOG_COUNT_CAP} "
            "(memabra_rewards_unlearned_capped 1: at least that many)",
            state.unlearned,
        ),
        _one(
            "memabra_rewards_unlearned_capped",
            "1 when memabra_rewards_unlearned stopped at its cap (there are more)",
            1 if state.unlearned_capped else 0,
        ),
        _one(
            "memabra_rewards_unlearned_oldest_age_seconds",
            "Time since the oldest unlearned reward became final (0: none)",
            _age(now, state.unlearned_since),
        ),
        *_policy_families(state),
        _one("memabra_turns_paused", "Turns an interrupt paused, waiting to be resumed", state.paused_turns),
        _one(
            "memabra_turns_paused_oldest_age_seconds",
            "Time since the oldest paused turn paused (0: none)",
            _age(now, state.paused_since),
        ),
        _one("memabra_turns_lost", "Turns whose process died mid-turn", state.lost_turns),
        _one(
            "memabra_turns_lost_oldest_age_seconds",
            "Time since the oldest lost turn was routed or last went on (0: none)",
            _age(now, state.lost_since),
        ),
        _family(
            "memabra_failed_turns",
            f"Turns logged as failed in the last {format_age(_window(state))} "
            f"(memabra_failed_turns_window_seconds), by cause: {', '.join(state.failed_turns)}",
            [((("cause", cause),), count) for cause, count in state.failed_turns.items()],
        ),
        _one("memabra_failed_turns_window_seconds", "How far back memabra_failed_turns counts", _s(_window(state))),
        *_reward_window_families(state),
        _one(
            "memabra_deletions_unfinished",
            "Deletion runs with no finish recorded (running, or died part way)",
            len(state.unfinished_deletions),
        ),
        _one(
            "memabra_deletions_unfinished_idle_seconds",
            "The longest time an unfinished deletion run has deleted nothing (0: none)",
            max((_age(now, d.progressed_at) for d in state.unfinished_deletions), default=0),
        ),
    ]
    if state.backend == "postgresql":
        tx = state.oldest_transaction
        families.append(
            _one(
                "memabra_postgres_oldest_transaction_age_seconds",
                "Age of the oldest transaction holding a transaction id on the server (0: none); "
                "the learner reads no reward committed after it",
                0 if tx is None else _age(now, tx.since),
            )
        )
    return tuple(f for f in families if f.samples)


def _policy_families(state: LogStatus) -> list[MetricFamily]:
    now = state.checked_at
    rows = state.policies

    def each(pick: Iterable[tuple[str, float | None]]) -> list[tuple[Labels, float]]:
        return [((("policy", policy),), value) for policy, value in pick if value is not None]

    return [
        _family(
            "memabra_learner_backlog",
            f"Final rewards after the policy learner's read position (waiting to be learned), counted up to "
            f"{caps.BACKLOG_COUNT_CAP} (memabra_learner_backlog_capped 1: at least that many)",
            each((p.policy, p.backlog) for p in rows),
        ),
        _family(
            "memabra_learner_backlog_capped",
            "1 when memabra_learner_backlog (or memabra_learner_backlog_held_back) stopped at its cap",
            each((p.policy, 1 if p.backlog_capped or p.held_back_capped else 0) for p in rows),
        ),
        _family(
            "memabra_learner_backlog_oldest_age_seconds",
            "Time since the oldest reward in the backlog became final (0: none; when the backlog is capped, "
            "the oldest among the first ones the learner reads)",
            each((p.policy, _age(now, p.backlog_since)) for p in rows),
        ),
        _family(
            "memabra_learner_backlog_held_back",
            "Backlog rewards the learner cannot read yet: committed after a transaction still open (PostgreSQL), "
            f"counted up to {caps.BACKLOG_COUNT_CAP}",
            each((p.policy, p.held_back) for p in rows),
        ),
        _family(
            "memabra_learner_learned_total",
            "Rewards the policy's learner has learned, at its last commit",
            each((p.policy, 0 if p.checkpoint is None else p.checkpoint.learned) for p in rows),
            kind="counter",
        ),
        _family(
            "memabra_learner_checkpoint_age_seconds",
            "Time since the policy's learner last committed (no series: it never did)",
            each((p.policy, None if p.checkpoint is None else _age(now, p.checkpoint.updated_at)) for p in rows),
        ),
        _family(
            "memabra_learner_lease_held",
            "1 when a learner holds the policy's lease",
            each((p.policy, 0 if p.lease is None else 1) for p in rows),
        ),
        _family(
            "memabra_policy_active_snapshot_age_seconds",
            "Time since the policy's active snapshot was saved (no series: none is active)",
            each((p.policy, None if p.active_since is None else _age(now, p.active_since)) for p in rows),
        ),
    ]


# The per-snapshot figures of LogStatus.reward_window, in SnapshotRewards' order: name and help
# ({window}: the window's length).
_REWARD_WINDOW_FIGURES = (
    (
        "memabra_policy_window_rewards",
        "Rewards that became final in the last {window} (memabra_policy_window_seconds), per policy and snapshot served",
    ),
    ("memabra_policy_window_reward_mean", "Mean total of the rewards final in the last {window}"),
    (
        "memabra_policy_window_reward_stddev",
        "Standard deviation (sample; 0 for one reward) of the totals of the rewards final in the last {window}",
    ),
    ("memabra_policy_window_success_mean", "Mean success component S of the rewards final in the last {window}"),
    (
        "memabra_policy_window_corrected_ratio",
        "Share of the rewards final in the last {window} with a correction (C > 0)",
    ),
    (
        "memabra_policy_window_missed_ratio",
        "Share of the rewards final in the last {window} that left out more relevant candidates of a kind "
        "than chosen ones helped (some H_k < 0)",
    ),
    (
        "memabra_policy_window_tool_error_ratio",
        "Share of the rewards final in the last {window} with a tool error (E > 0)",
    ),
)


def _reward_window_families(state: LogStatus) -> list[MetricFamily]:
    """Per policy and snapshot served, the rewards of the window: a series only for a snapshot
    with rewards in it (their number bounds the series), and each policy's active and previous
    snapshot by name, so a rule compares the two."""
    window = timedelta(0) if state.rewards_since is None else state.checked_at - state.rewards_since
    samples: list[list[tuple[Labels, float]]] = [[] for _ in _REWARD_WINDOW_FIGURES]
    for w in state.reward_window:
        labels: Labels = (("policy", w.policy), ("version", w.version))
        figures = (
            w.rewards,
            w.mean_reward,
            w.reward_stddev,
            w.mean_success,
            w.corrected_share,
            w.missed_share,
            w.tool_error_share,
        )
        for into, value in zip(samples, figures, strict=True):
            into.append((labels, value))
    roles = [
        ((("policy", p.policy), ("version", version), ("role", role)), 1)
        for p in state.policies
        for role, version in (("active", p.active_version), ("previous", p.previous_version))
        if version is not None
    ]
    return [
        *(
            _family(name, about.format(window=format_age(window)), figure_samples)
            for (name, about), figure_samples in zip(_REWARD_WINDOW_FIGURES, samples, strict=True)
        ),
        _one("memabra_policy_window_seconds", "How far back the memabra_policy_window_* figures read", _s(window)),
        _family(
            "memabra_policy_snapshot",
            "1 for each policy's active snapshot and the previous one (what a rollback re-activates), by role",
            roles,
        ),
    ]


def _problem_samples(
    state: LogStatus,
    problems: Sequence[HealthProblem],
    checked: Collection[str] | None,
    writes: bool,
    encoder: bool,
) -> list[tuple[Labels, float]]:
    """Every check's 0/1, failing or not: an alert on ``== 1`` then needs no ``absent()``. The
    learner check is one series per checked policy, or one without a policy while the log has none;
    the writes and encoder checks are there where they ran."""
    failing = {(p.check if p.policy is None else LEARNER_CHECK, p.policy or "") for p in problems}
    series: list[tuple[str, str]] = [(FEEDBACK_WINDOWS_CHECK, "")]
    if state.policies:
        series += [(LEARNER_CHECK, p.policy) for p in state.policies if checked is None or p.policy in checked]
    else:
        series.append((LEARNER_CHECK, ""))
    series += [(DELETIONS_CHECK, ""), (TURNS_CHECK, "")]
    if writes:
        series.append((WRITES_CHECK, ""))
    if encoder:
        series.append((ENCODER_CHECK, ""))
    samples: list[tuple[Labels, float]] = []
    for check, policy in series:
        labels: Labels = (("check", check.replace(" ", "_")),) + ((("policy", policy),) if policy else ())
        samples.append((labels, 1 if (check, policy) in failing else 0))
    return samples


def _one(name: str, help_text: str, value: float) -> MetricFamily:
    return MetricFamily(name, "gauge", help_text, (((), value),))


def _family(
    name: str, help_text: str, samples: Iterable[tuple[Labels, float]], *, kind: Literal["gauge", "counter"] = "gauge"
) -> MetricFamily:
    return MetricFamily(name, kind, help_text, tuple(samples))


def _age(now: datetime, since: datetime | None) -> float:
    # a clock step between writer and reader must not show a negative wait
    return 0 if since is None else max(0.0, round((now - since).total_seconds(), 3))


def _s(delta: timedelta) -> float:
    return delta.total_seconds()


def _window(state: LogStatus) -> timedelta:
    return timedelta(0) if state.failed_since is None else state.checked_at - state.failed_since
