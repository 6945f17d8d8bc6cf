"""``memabra ope log`` and ``memabra train --from-log``."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
)
from rich.table import Table
from sqlalchemy.engine import make_url

from memabra._cli._common import (
    check_output_path,
    console,
    fail,
    parse_time,
    run_guarded,
    transient_progress,
    write_output,
)
from memabra._cli._database import DbOption
from memabra._config import parse_weights
from memabra.storage import EpisodeLog

if TYPE_CHECKING:  # the offline package imports scikit-learn: loaded only when a command needs it
    from memabra.evals.offline import LogEvaluation


def _fmt(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:+.4f}"


def _intervals(alpha: float) -> str:
    """What ope log and train print: "95% normal (delta-method) intervals" (99.9%, not "100%")."""
    return f"{round(100 * (1 - alpha), 10):g}% normal (delta-method) intervals"


def _decision_ids(path: Path) -> list[str]:
    """The decision ids ``--decisions`` lists: one per line, blank lines and ``#`` comments skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--decisions {path}: cannot read it ({exc})")
    ids = [line.split("#", 1)[0].strip() for line in lines]
    ids = [i for i in ids if i]
    if not ids:
        fail(f"--decisions {path}: the file lists no decision ids (one per line)")
    return ids


def ope_log(
    policy: Annotated[
        list[str],
        typer.Option(
            "--policy",
            help="snapshot:VERSION, active, a router (linear, vw, hybrid, bm25, embedding, random[:JSON args]), "
            "or one of your own (module:Class[:JSON args], module:function); repeatable.",
        ),
    ],
    db: DbOption = None,
    since: Annotated[str | None, typer.Option(help="Only decisions at or after this ISO time.")] = None,
    until: Annotated[str | None, typer.Option(help="Only decisions before this ISO time.")] = None,
    weights: Annotated[
        str | None, typer.Option(help="Re-score stored reward components under these weights first, e.g. wc=0.8.")
    ] = None,
    estimators: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated subset of: sips, snsips, iips, rips, pi, snpi, dm, dr, idr, cdr, pi-dr (default: all)."
        ),
    ] = None,
    alpha: Annotated[float, typer.Option(min=0.001, max=0.5, help="1 - confidence of the intervals.")] = 0.05,
    seed: Annotated[int, typer.Option(min=0, help="Seeds the reward model and the target rollouts.")] = 0,
    include_provisional: Annotated[
        bool,
        typer.Option(
            "--include-provisional",
            help="Also evaluate decisions whose reward is still provisional (default: final rewards only).",
        ),
    ] = False,
    decisions: Annotated[
        Path | None,
        typer.Option(
            "--decisions",
            exists=True,
            dir_okay=False,
            help="Only the decisions whose ids this file lists, one per line (# starts a comment): a segment of the traffic.",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write results here.", callback=check_output_path)
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Save a PNG chart of the estimates here.", callback=check_output_path)
    ] = None,
    store: Annotated[bool, typer.Option("--store/--no-store", help="Keep the results in the log's OPE runs.")] = True,
) -> None:
    """Would these policies have done better on what we logged? Estimates with intervals and a support verdict."""
    from memabra.evals.offline import (
        DEFAULT_ESTIMATORS,
        Target,
        evaluate_policies,
        plot_estimates,
        resolve_policy,
    )

    reweight = run_guarded(parse_weights, weights) if weights else None
    names = [e.strip() for e in estimators.split(",") if e.strip()] if estimators else list(DEFAULT_ESTIMATORS)
    only = _decision_ids(decisions) if decisions is not None else None
    with run_guarded(EpisodeLog, db) as log:
        targets = []
        for spec in policy:
            resolved = run_guarded(resolve_policy, spec, log)
            targets.append(Target(spec, resolved.router, resolved.snapshot_version))
        # a long log takes minutes (about 11 ms a decision): say that it is moving, then vanish
        with transient_progress(
            TextColumn("evaluating: reward model, then"), TextColumn("{task.completed} decisions estimated")
        ) as bar:
            task = bar.add_task("ope", total=None)
            evaluations = run_guarded(
                evaluate_policies,
                log,
                targets,
                estimators=names,
                since=parse_time(since, "--since"),
                until=parse_time(until, "--until"),
                weights=reweight,
                alpha=alpha,
                seed=seed,
                include_provisional=include_provisional,
                decision_ids=only,
                progress=lambda done: bar.update(task, completed=done),
            )
        if store:
            for evaluation in evaluations:
                run_guarded(log.record_ope_results, list(evaluation.results))
    first = evaluations[0]
    model = first.reward_model
    caption = _intervals(alpha)
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
    table = Table(
        title=f"offline evaluation on {first.n_rounds} logged decisions · logging policy {first.logging_value:+.4f}",
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
            "named no rewarded decision in the window (unknown ids, episode ids, or outside --since/--until)",
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
    if json_out is not None:
        doc = {
            "n_rounds": first.n_rounds,
            "n_provisional_left_out": first.n_provisional,
            "logging_value": first.logging_value,
            "alpha": alpha,
            "ci_method": "normal",  # as ope arrays --json names it: every interval here is normal (delta method)
            "reward_model": None if model is None else model.as_dict(),
            # the data read: the range asked for, the instant the log was read as of, the first and last decision
            "window": first.results[0].details.get("window") if first.results else None,
            "policies": {ev.policy: ev.as_json() for ev in evaluations},
        }
        write_output(json_out, json.dumps(_finite(doc), indent=2, allow_nan=False) + "\n")
        console.print(f"wrote {json_out}")
    if plot is not None:
        run_guarded(
            plot_estimates, [r for ev in evaluations for r in ev.results], plot, logging_value=first.logging_value
        )
        console.print(f"wrote {plot}")


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

    table = Table(
        title=f"paired differences of the recommended estimates on the same decisions ({_intervals(alpha)})",
        caption="only supported targets are compared: an unsupported one's bounds say all the log can",
    )
    for col in ("policy", "minus", "difference", "ci low", "ci high", "verdict"):
        table.add_column(col, justify="left" if col in ("policy", "minus", "verdict") else "right")
    supported = [ev for ev in evaluations if ev.recommended.supported]
    for i, ev in enumerate(supported):
        others = [o.policy for o in supported[i + 1 :] if o.policy in ev.versus] + [LOGGING_POLICY]
        for other in others:
            d = ev.versus[other]
            if d.ci_low > 0:
                verdict = f"{ev.policy} better"
            elif d.ci_high < 0:
                verdict = f"{other} better"
            else:
                verdict = "not distinguishable on this log"
            table.add_row(ev.policy, other, _fmt(d.value), _fmt(d.ci_low), _fmt(d.ci_high), verdict)
    return table


def _finite(value: object) -> object:
    """NaN and inf become null: JSON has neither."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def train(
    from_log: Annotated[
        bool,
        typer.Option("--from-log", help="Train from the logged decisions and propensities (the only source so far)."),
    ] = True,
    db: DbOption = None,
    learner: Annotated[str, typer.Option(help="linear, vw, or another router that learns.")] = "linear",
    args: Annotated[
        str | None, typer.Option("--args", help="Learner arguments as JSON, e.g. '{\"epsilon\": 0.05}'.")
    ] = None,
    since: Annotated[str | None, typer.Option(help="Only decisions at or after this ISO time.")] = None,
    holdout: Annotated[
        float, typer.Option(min=0.05, max=0.95, help="Latest share of decisions held out for evaluation.")
    ] = 0.2,
    alpha: Annotated[float, typer.Option(min=0.001, max=0.5)] = 0.05,
    weights: Annotated[
        str | None, typer.Option(help="Train and evaluate on rewards re-scored under these weights.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Save the snapshot even if it does not beat the logging policy.")
    ] = False,
    include_provisional: Annotated[
        bool,
        typer.Option(
            "--include-provisional",
            help="Also train and evaluate on decisions whose reward is still provisional (default: final only).",
        ),
    ] = False,
) -> None:
    """Fit a new policy from the log; keep it only if it beats the logging policy offline."""
    from memabra.evals.offline import train_from_log

    if not from_log:
        fail("only --from-log training exists")
    try:
        learner_args = json.loads(args) if args else {}
    except json.JSONDecodeError as exc:
        fail(f"--args is not JSON: {exc}")
    reweight = run_guarded(parse_weights, weights) if weights else None
    with (
        run_guarded(EpisodeLog, db) as log,
        transient_progress(TextColumn("training"), BarColumn(), MofNCompleteColumn()) as bar,
    ):
        task = bar.add_task("train", total=None)
        report = run_guarded(
            train_from_log,
            log,
            learner=learner,
            learner_args=learner_args,
            since=parse_time(since, "--since"),
            holdout=holdout,
            alpha=alpha,
            weights=reweight,
            force=force,
            progress=lambda i: bar.update(task, completed=i),
            include_provisional=include_provisional,
        )
    e = report.estimate
    if not report.supported:
        # --force saves it all the same: say what the verdict decides only where it decides
        refused = "" if report.saved_version else "; not saved"
        console.print(f"[bold red]unsupported[/]: {escape(report.reason)}{refused}")
    console.print(
        f"trained {report.learner} on {report.n_train} decisions; held out {report.n_holdout} from {report.split_at:%Y-%m-%d %H:%M:%S}"
    )
    # the logging policy's mean with an interval at the same level as the estimate's
    half = NormalDist().inv_cdf(1 - alpha / 2) * report.logging_stderr
    console.print(
        f"{e.estimator}: new policy {e.value:+.4f} [{e.ci_low:+.4f}, {e.ci_high:+.4f}] vs logging policy "
        f"{report.logging_value:+.4f} [{report.logging_value - half:+.4f}, {report.logging_value + half:+.4f}] "
        f"({_intervals(alpha)})"
    )
    if report.improvement is not None:
        d = report.improvement
        console.print(
            f"new minus logging policy, paired on the held-out decisions: {d.value:+.4f} [{d.ci_low:+.4f}, {d.ci_high:+.4f}]"
        )
    if report.saved_version:
        verdict = (
            "beats the logging policy"
            if report.promotable
            else "forced: the log does NOT support its estimate"
            if not report.supported
            else "forced, does NOT beat the logging policy"
        )
        where = ["--db", make_url(db).render_as_string(hide_password=True)] if db else []
        promote = shlex.join(["memabra", "policies", "promote", report.saved_version, *where])
        console.print(
            f"saved snapshot [bold]{escape(report.saved_version)}[/] ({verdict}); promote it with: {escape(promote)}",
            soft_wrap=True,  # the command stays on one line, to copy whole
        )
    else:
        why = (
            "the log does not support its estimate"
            if not report.supported
            else "the lower bound of its paired difference from the logging policy is not above 0"
        )
        console.print(f"not saved: {why} (use --force to keep it anyway)")
