"""What ``memabra ope log`` prints and writes: each target's estimates with the recommended one
marked, why a recommendation is unsupported or widened, the paired differences between targets,
and the same results as JSON. ``memabra train`` shares the intervals' caption, the effective
sample size note and the command recorded with the stored runs (:func:`invocation`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from memabra._cli._common import console
from memabra._cli._tables import Table

if TYPE_CHECKING:  # the offline package imports scikit-learn: loaded only when a command needs it
    from memabra._records import RewardWeights
    from memabra.evals.offline import LogEvaluation, TrainReport

__all__ = [
    "effective_sample_size",
    "ess_note",
    "evaluations_json",
    "intervals",
    "invocation",
    "logging_interval",
    "paired_verdict",
    "print_evaluations",
]


def _fmt(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:+.4f}"


def intervals(alpha: float) -> str:
    """What ope log and train print: "95% normal (delta-method) intervals" (99.9%, not "100%")."""
    return f"{round(100 * (1 - alpha), 10):g}% normal (delta-method) intervals"


def logging_interval(evaluation: LogEvaluation, alpha: float) -> tuple[float, float]:
    """The logging policy's mean reward's ``1 - alpha`` normal interval on the decisions read."""
    half = NormalDist().inv_cdf(1 - alpha / 2) * evaluation.logging_stderr
    return evaluation.logging_value - half, evaluation.logging_value + half


def print_evaluations(
    evaluations: Sequence[LogEvaluation],
    alpha: float,
    only: Sequence[str] | None,
    logged_by: Sequence[str] | None = None,
) -> None:
    """The estimates table, the recommendations' notes, what the window left out (of ``only``, the
    ``--decisions`` ids, when given) and the paired differences; ``logged_by``: the ``--logged-by``
    policies whose decisions alone were read."""
    first = evaluations[0]
    model = first.reward_model
    caption = intervals(alpha)
    caption += (
        ""
        if model is None
        else (
            "\n"
            f"reward model: {model.learner}, {model.n_folds}-fold cross-fitted on {model.n_fit} decisions; "
            f"held-out RMSE {model.heldout_rmse:.3f} (constant model {model.constant_rmse:.3f})"
        )
    )
    additivity = first.additivity
    if additivity is not None:
        verdict = "adds up over slots" if additivity.additive else "does not add up over slots (PI not recommended)"
        line = (
            f"reward {verdict}: held-out RMSE {additivity.additive_rmse:.3f} additive, "
            f"{additivity.free_rmse:.3f} counting used picks freely"
        )
        caption = f"{caption}\n{line}"
    by = f" (by {', '.join(sorted(set(logged_by)))} only)" if logged_by else ""
    # the logging policy's mean with its interval: an online value read later is compared with both
    low, high = logging_interval(first, alpha)
    seed = first.provenance.get("seed")
    table = Table(
        title=f"offline evaluation on {first.n_rounds} logged decisions{by} · logging policy "
        f"{first.logging_value:+.4f} [{_fmt(low)}, {_fmt(high)}]" + (f" · seed {seed}" if seed is not None else ""),
        caption=caption,
    )
    for col in ("policy", "estimator", "value", "ci low", "ci high", "ESS", "mean w [interval]", "floor", "verdict"):
        table.add_column(col, justify="left" if col in ("policy", "estimator", "verdict") else "right")
    for ev in evaluations:
        rec = ev.recommended
        for name, e in ev.estimates.items():
            weight = ev.weight_diagnostics(name)
            is_rec = name == rec.estimator
            if is_rec:  # in brief too: a reason is a paragraph, printed under the table
                verdict = (
                    "[bold red]UNSUPPORTED[/] (why: below)"
                    if not rec.supported
                    else "[bold]supported[/], widened (below)"
                    if ev.unreached_share > 0
                    else "[bold]supported[/]"
                )
            else:  # its own weight's verdict, in brief
                own = ev.verdicts.get(name)
                verdict = (
                    "" if own is None else "[dim]supported[/]" if own.supported else f"[dim]unsupported ({own.rule})[/]"
                )
            table.add_row(
                ev.policy,
                f"[bold]{name} *[/]" if is_rec else name,
                _fmt(rec.value if is_rec else e.value),  # clipped to the reward's range
                _fmt(rec.ci_low if is_rec else e.ci_low),  # an unsupported recommendation's bounds
                _fmt(rec.ci_high if is_rec else e.ci_high),
                "-" if weight is None else f"{weight.effective_sample_size:.0f}",  # dm weights nothing
                "-"
                if weight is None
                else f"{weight.mean_weight:.2f} [{weight.mean_weight_ci_low:.2f}, {weight.mean_weight_ci_high:.2f}]",
                f"{ev.floor_share:.0%}",
                verdict,
            )
    console.print(table)
    console.print(
        "* recommended estimate (see docs/ope.md for the rule and each estimator's assumption)", highlight=False
    )
    for ev in evaluations:
        note = _recommendation_note(ev)
        if note:
            console.print(f"[bold]{escape(ev.policy)}[/] ({ev.recommended.estimator}): {note}", highlight=False)
    if first.n_provisional:
        console.print(
            f"left out {first.n_provisional} decisions whose reward is still provisional (--include-provisional "
            "evaluates them too)",
            highlight=False,
        )
    if only is not None and first.n_rounds + first.n_provisional < len(only):
        # ids that read nothing are left out silently by the query: a file of episode ids, or of
        # another log's decisions, would evaluate a smaller segment than the user meant
        console.print(
            f"{len(only) - first.n_rounds - first.n_provisional} of the {len(only)} decision ids in --decisions "
            "named no rewarded decision in the window (unknown ids, episode ids, or outside --since/--until"
            + (", or not logged by --logged-by)" if logged_by else ")"),
            highlight=False,
        )
    paired = _paired_table(evaluations, alpha)
    if paired.row_count:
        console.print(paired)
    else:
        # an empty table with a caption reads as a failure to compute; say why there is none
        console.print(
            "paired differences: none, no target is supported on this log "
            "(an unsupported target's bounds say all the log can)",
            highlight=False,
        )


def evaluations_json(
    evaluations: Sequence[LogEvaluation], alpha: float, weights: RewardWeights | None = None
) -> object:
    """The ``--json`` document: every target's results, NaN and inf as null; ``weights`` the
    ``--weights`` the rewards were re-scored under (null: the totals as logged)."""
    first = evaluations[0]
    model = first.reward_model
    doc = {
        "n_rounds": first.n_rounds,
        "n_provisional_left_out": first.n_provisional,
        "logging_value": first.logging_value,
        # its interval, at the estimates' level, on the same decisions
        "logging_ci_low": logging_interval(first, alpha)[0],
        "logging_ci_high": logging_interval(first, alpha)[1],
        "alpha": alpha,
        "ci_method": "normal",  # as ope arrays --json names it: every interval here is normal (delta method)
        "weights": None if weights is None else weights.as_dict(),  # --weights, null: the totals as logged
        "reward_model": None if model is None else model.as_dict(),
        # the data read: the range asked for, the instant the log was read as of, the first and last decision
        "window": first.results[0].details.get("window") if first.results else None,
        # the seed, the estimators asked for, include_provisional, the targets evaluated together, the
        # memabra version and the command with every option: what reruns this evaluation
        "provenance": dict(first.provenance),
        "policies": {ev.policy: ev.as_json() for ev in evaluations},
    }
    return _finite(doc)


def _recommendation_note(evaluation: LogEvaluation) -> str:
    """Why a recommendation is unsupported, or how far its interval was widened; empty for a plain
    supported one."""
    rec = evaluation.recommended
    if not rec.supported:
        return f"[bold red]unsupported[/]: {escape(rec.reason)}"
    if evaluation.unreached_share > 0:
        return f"interval widened for the {evaluation.unreached_share:.1%} of its probability the log did not reach"
    return ""


def _paired_table(evaluations: Sequence[LogEvaluation], alpha: float) -> Table:
    """Each supported target against every later supported one and the logging policy."""
    from memabra.evals.offline import LOGGING_POLICY

    supported = [ev for ev in evaluations if ev.recommended.supported]
    left_out = [ev.policy for ev in evaluations if not ev.recommended.supported]
    table = Table(
        title=f"paired differences of the recommended estimates on the same decisions ({intervals(alpha)})",
        # said only where a target was left out: under a table of every target it reads as a warning
        caption=(
            f"only supported targets are compared ({escape(', '.join(left_out))} left out): an unsupported one's bounds "
            "say all the log can"
            if left_out
            else None
        ),
    )
    for col in ("policy", "minus", "difference", "ci low", "ci high", "verdict"):
        table.add_column(col, justify="left" if col in ("policy", "minus", "verdict") else "right")
    for i, ev in enumerate(supported):
        others = [o.policy for o in supported[i + 1 :] if o.policy in ev.versus] + [LOGGING_POLICY]
        for other in others:
            d = ev.versus[other]
            verdict = paired_verdict(ev.policy, other, d.ci_low, d.ci_high)
            table.add_row(ev.policy, other, _fmt(d.value), _fmt(d.ci_low), _fmt(d.ci_high), verdict)
    return table


def paired_verdict(policy: str, other: str, ci_low: float, ci_high: float) -> str:
    """What a paired difference's interval says: which is better, or that the log cannot tell."""
    if ci_low > 0:
        return f"{policy} better"
    if ci_high < 0:
        return f"{other} better"
    return "not distinguishable on this log"


def _finite(value: object) -> object:
    """NaN and inf become null: JSON has neither."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# options a rerun does not need, or that would put a secret in the log: where the output went, and
# the database (the run is stored in it)
_NOT_RECORDED = frozenset({"db", "json_out", "plot", "store"})


def invocation(ctx: typer.Context) -> dict[str, Any]:
    """The command being run and its every option's value (defaults too: a later default must not
    change what a stored run says it was made with), kept with the stored runs to rerun them."""
    names = []
    at: Any = ctx
    while at is not None and at.parent is not None:  # the root's name is the program's, not memabra's
        names.append(at.info_name or "")
        at = at.parent
    arguments = {
        name: str(value) if isinstance(value, Path) else value
        for name, value in sorted(ctx.params.items())
        if name not in _NOT_RECORDED
    }
    return {"command": " ".join(["memabra", *reversed(names)]), "arguments": arguments}


def effective_sample_size(report: TrainReport) -> float | None:
    weight = report.evaluation.weight_diagnostics(report.estimate.estimator)
    return None if weight is None else weight.effective_sample_size


def ess_note(report: TrainReport) -> str:
    """How many held-out decisions the estimate effectively rests on (its weight's ESS)."""
    ess = effective_sample_size(report)
    return "" if ess is None else f"; ESS {ess:.0f} of {report.n_holdout} held-out decisions"
