"""``memabra ope runs``: the offline evaluations stored in the log, one line per run, with what
each was computed on (its data window, the policies whose decisions alone it read, and the reward
weights it scored under), so runs made weeks apart, on one bot's decisions, or under other
``--weights``, are not read as comparable when they are not."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.text import Text

from memabra._cli._common import JsonOutOption, console, plain, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._offline_report import paired_verdict
from memabra._cli._tables import Table
from memabra._records import OPEResult
from memabra.storage import EpisodeLog

__all__ = ["ope_runs", "stored_runs"]

# list_ope_runs counts rows, one per estimator: a run stores at most this many (11 estimators of
# ope log), so asking for this many rows a run still reaches the last run asked for
_ROWS_PER_RUN = 16


@dataclass(frozen=True, slots=True)
class StoredRun:
    """One stored run: its headline estimate (the recommended one; a run stored before
    recommendations were recorded shows its first) and how many estimators it stored."""

    headline: OPEResult
    n_estimates: int


def stored_runs(results: Sequence[OPEResult], limit: int, complete: bool) -> list[StoredRun]:
    """The rows grouped by run, newest first, at most ``limit`` runs. ``complete``: every row of
    the oldest run was read (not cut off by the row limit), else that run is dropped rather than
    shown with a headline that may not be its own."""
    by_run: dict[str, list[OPEResult]] = {}
    for r in results:
        by_run.setdefault(r.run_id, []).append(r)
    groups = list(by_run.values())
    if not complete and groups:
        groups.pop()
    runs = []
    for rows in groups:
        recommended = [r for r in rows if r.details.get("recommended") is True]
        first = min(rows, key=lambda r: r.created_at)
        runs.append(StoredRun(recommended[0] if recommended else first, len(rows)))
    runs.sort(key=lambda run: run.headline.created_at, reverse=True)
    return runs[:limit]


def _window(result: OPEResult) -> str:
    window = result.details.get("window")
    if not isinstance(window, dict):
        return "not recorded"
    first, last = window.get("first_decision_at"), window.get("last_decision_at")
    span = f"{str(first or '-')[:19]} → {str(last or '-')[:19]}"
    # a run on one bot's decisions (ope log --logged-by) must not read as one on the whole log
    logged_by = window.get("logged_by")
    if isinstance(logged_by, list) and logged_by:
        span += f"\nlogged by {', '.join(map(str, logged_by))} only"
    given = window.get("decision_ids_given")
    if isinstance(given, int):
        span += f"\n{given} decision ids given"
    return span


def _as_json(run: StoredRun) -> dict[str, Any]:
    r = run.headline
    return {
        "run_id": r.run_id,
        "created_at": r.created_at,
        "policy": r.policy,
        "snapshot_version": r.snapshot_version,
        "estimator": r.estimator,
        "recommended": r.details.get("recommended") is True,
        "value": r.value,
        "ci_low": r.ci_low,
        "ci_high": r.ci_high,
        "alpha": r.alpha,
        "n_rounds": r.n_rounds,
        "n_estimates": run.n_estimates,
        "supported": r.details.get("supported"),
        # why the log does not support the run's recommended estimate; null where it does, or for a
        # run stored before its verdict's reason was kept
        "reason": _reason(r),
        "logging_value": r.details.get("logging_value"),
        # null: the totals as logged; weights_recorded false: a run stored before runs kept them
        "weights": r.reward_weights,
        "weights_recorded": r.weights_recorded,
        # the reward version and stored weights of the rewards it read (null before runs kept them):
        # what "as logged" meant when the run was made, a `rewards recompute` since notwithstanding
        "reward_scales": r.details.get("reward_scales"),
        "window": r.details.get("window"),
        # the logging policy's interval on the same decisions; null for a run stored before it was kept
        "logging_ci_low": r.details.get("logging_ci_low"),
        "logging_ci_high": r.details.get("logging_ci_high"),
        # the diagnostics (effective sample size, mean weight and its interval, largest weight) of the
        # weight the headline estimate leans on; null for the direct method or an older run
        "weight": _weight(r),
        # its paired differences from the other supported targets of its evaluation and the logging
        # policy ({} where unsupported); null for a run stored before they were kept
        "versus": r.details.get("versus"),
        # seed, interval method, estimators, targets evaluated together, command: null before kept
        "provenance": r.details.get("provenance"),
        "training": r.details.get("training"),  # train --from-log's learner, split and counts
    }


def _weights_text(result: OPEResult) -> str:
    """The weights it scored under, with the recorded scales of an "as logged" run
    (:attr:`OPEResult.weights_lines <memabra.OPEResult.weights_lines>`, which the admin shows too)."""
    return "\n".join(result.weights_lines)


def _weight(result: OPEResult) -> dict[str, Any] | None:
    label, diagnostics = result.details.get("weight"), result.details.get("diagnostics")
    if not isinstance(label, str) or not isinstance(diagnostics, dict):
        return None
    figures = diagnostics.get(label)
    return {"label": label, **figures} if isinstance(figures, dict) else None


def _how(result: OPEResult) -> str:
    """The estimate's interval, how it was computed and on how many effective decisions."""
    made = result.details.get("provenance")
    method = made.get("ci_method") if isinstance(made, dict) else None
    line = f"{round(100 * (1 - result.alpha), 10):g}%" + (f" {method}" if isinstance(method, str) else "")
    weight = _weight(result)
    ess = None if weight is None else weight.get("effective_sample_size")
    return line + (f", ESS {ess:.0f}" if isinstance(ess, (int, float)) else "")


def _paired_lines(result: OPEResult) -> list[str]:
    """A run's stored paired differences, as ``ope log`` printed them and in its order (the
    targets as given, then the logging policy), whichever database kept them."""
    versus = result.details.get("versus")
    if not isinstance(versus, dict):
        return []
    made = result.details.get("provenance")
    targets = made.get("targets") if isinstance(made, dict) else None
    order = paired_order(list(versus), [str(t) for t in targets] if isinstance(targets, list) else [])
    lines = []
    for other in order:
        d = versus[other]
        if not isinstance(d, dict) or not all(
            isinstance(d.get(k), (int, float)) for k in ("difference", "ci_low", "ci_high")
        ):
            continue
        verdict = paired_verdict(result.policy, other, d["ci_low"], d["ci_high"])
        lines.append(f"minus {other} {d['difference']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]: {verdict}")
    return lines


# memabra.evals.offline.LOGGING_POLICY, not imported here: the offline package loads scikit-learn
_LOGGING_POLICY = "logging policy"


def paired_order(versus: Sequence[str], targets: Sequence[str]) -> list[str]:
    """The paired differences' other policies in the order ``ope log`` printed them: the targets
    in the order they were given, then the logging policy. A stored run's ``versus`` comes back
    from PostgreSQL's JSONB in an order of its own (shortest key first)."""
    rank = {name: i for i, name in enumerate(targets)}
    return sorted(versus, key=lambda name: (name == _LOGGING_POLICY, rank.get(name, len(rank)), name))


def _reason(result: OPEResult) -> str | None:
    reason = result.details.get("reason")
    return reason if isinstance(reason, str) and reason else None


def ope_runs(
    db: DbOption = None,
    policy: Annotated[str | None, typer.Option(help="Only runs of this target policy specification.")] = None,
    version: Annotated[str | None, typer.Option(help="Only runs of this snapshot version.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="The newest this many runs.")] = 20,
    json_out: JsonOutOption = None,
) -> None:
    """The offline evaluations stored in the log (``ope log``, ``train --from-log``), newest first,
    with the reward weights and data window each was computed on."""
    rows = limit * _ROWS_PER_RUN
    with run_guarded(EpisodeLog, db) as log:
        results = run_guarded(log.list_ope_runs, version, policy=policy, limit=rows)
    runs = stored_runs(results, limit, complete=len(results) < rows)
    table = Table(
        title=f"{len(runs)} stored OPE run(s), newest first", caption="weights: the reward weights it scored under"
    )
    for column in (
        "when (UTC)",
        "run",
        "target",
        "estimator",
        "estimate",
        "n",
        "logging",
        "weights",
        "decisions (UTC)",
    ):
        table.add_column(column, justify="right" if column in ("estimate", "n", "logging") else "left")
    # the reasons and paired differences under the table, as ope log prints them: a sentence or two
    # each would crowd the columns
    reasons: list[tuple[str, str]] = []
    paired: list[tuple[str, list[str]]] = []
    for run in runs:
        r = run.headline
        label = f"{r.run_id[:8]} {r.snapshot_version or r.policy}"
        if lines := _paired_lines(r):
            paired.append((label, lines))
        logging_value = r.details.get("logging_value")
        supported = r.details.get("supported")
        verdict = ""
        if supported is False:
            reason = _reason(r)
            verdict = " unsupported" if reason is None else " unsupported (why: below)"
            if reason is not None:
                reasons.append((f"{label} ({r.estimator})", reason))
        made = r.details.get("provenance")
        seed = made.get("seed") if isinstance(made, dict) else None
        table.add_row(
            plain(f"{r.created_at:%Y-%m-%d %H:%M:%S}"),
            plain(r.run_id[:8] + (f"\nseed {seed}" if isinstance(seed, int) else "")),
            plain(r.snapshot_version or r.policy),
            plain(r.estimator + verdict),
            plain(f"{r.value:+.4f} [{r.ci_low:+.4f}, {r.ci_high:+.4f}]\n{_how(r)}"),
            plain(str(r.n_rounds)),
            plain(f"{logging_value:+.4f}" if isinstance(logging_value, (int, float)) else "-"),
            plain(_weights_text(r)),
            plain(_window(r)),
        )
    console.print(table)
    for run_label, reason in reasons:
        console.print(Text.assemble(run_label, ": unsupported: ", reason))
    for run_label, lines in paired:
        console.print(Text.assemble(run_label, ", paired on the same decisions: ", "; ".join(lines)))
    write_json(json_out, {"runs": [_as_json(run) for run in runs]})
