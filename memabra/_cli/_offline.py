"""``memabra ope log`` and ``memabra train --from-log``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memabra._cli._common import DbOption, check_output_path, console, fail, run_guarded
from memabra._cli._log import _parse_time
from memabra._config import parse_weights
from memabra.storage import EpisodeLog


def _fmt(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:+.4f}"


def ope_log(
    policy: Annotated[list[str], typer.Option("--policy", help="snapshot:VERSION, active, or a router (vw, hybrid, bm25, embedding, random[:JSON args]); repeatable.")],
    db: DbOption = None,
    since: Annotated[str | None, typer.Option(help="Only decisions at or after this ISO time.")] = None,
    until: Annotated[str | None, typer.Option(help="Only decisions before this ISO time.")] = None,
    weights: Annotated[str | None, typer.Option(help="Re-score stored reward components under these weights first, e.g. wc=0.8.")] = None,
    estimators: Annotated[str, typer.Option(help="Comma-separated: ipw, snipw, dm, dr, sndr, switch-dr, dr-os.")] = "ipw,snipw,dm,dr,sndr",
    alpha: Annotated[float, typer.Option(min=0.001, max=0.5, help="1 - confidence of the intervals.")] = 0.05,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results here.", callback=check_output_path)] = None,
    plot: Annotated[Path | None, typer.Option(help="Save a PNG chart of the estimates here.", callback=check_output_path)] = None,
    store: Annotated[bool, typer.Option("--store/--no-store", help="Keep the results in the log's OPE runs.")] = True,
) -> None:
    """Would these policies have done better on what we logged? Estimates with intervals."""
    from memabra.evals.offline import evaluate_on_log, plot_estimates, resolve_policy

    reweight = run_guarded(parse_weights, weights) if weights else None
    names = [e.strip() for e in estimators.split(",") if e.strip()]
    evaluations = []
    with run_guarded(EpisodeLog, db) as log:
        for spec in policy:
            resolved = run_guarded(resolve_policy, spec, log)
            evaluation = run_guarded(
                evaluate_on_log, log, resolved.router, policy=spec, snapshot_version=resolved.snapshot_version,
                estimators=names, since=_parse_time(since, "--since"), until=_parse_time(until, "--until"),
                weights=reweight, alpha=alpha,
            )
            evaluations.append(evaluation)
            if store:
                run_guarded(log.record_ope_results, list(evaluation.results))
    table = Table(title=f"offline evaluation on {evaluations[0].n_rounds} logged decisions · logging policy {evaluations[0].logging_value:+.4f}")
    for col in ("policy", "estimator", "value", "ci low", "ci high", "ESS", "max w", "w=0"):
        table.add_column(col, justify="right" if col not in ("policy", "estimator") else "left")
    for ev in evaluations:
        for r in ev.results:
            table.add_row(ev.policy, r.estimator, _fmt(r.value), _fmt(r.ci_low), _fmt(r.ci_high), f"{ev.effective_sample_size:.0f}", f"{ev.max_weight:.1f}", f"{ev.zero_weight_share:.0%}")
    console.print(table)
    if json_out is not None:
        doc = {
            "n_rounds": evaluations[0].n_rounds,
            "logging_value": evaluations[0].logging_value,
            "alpha": alpha,
            "policies": {
                ev.policy: {
                    "snapshot_version": ev.snapshot_version,
                    "diagnostics": {
                        "effective_sample_size": ev.effective_sample_size, "max_weight": ev.max_weight,
                        "mean_weight": ev.mean_weight, "zero_weight_share": ev.zero_weight_share,
                    },
                    "estimates": {r.estimator: {"value": r.value, "ci_low": r.ci_low, "ci_high": r.ci_high} for r in ev.results},
                }
                for ev in evaluations
            },
        }
        json_out.write_text(json.dumps(doc, indent=2, allow_nan=False if all(math.isfinite(r.value) for ev in evaluations for r in ev.results) else True))
        console.print(f"wrote {json_out}")
    if plot is not None:
        run_guarded(plot_estimates, [r for ev in evaluations for r in ev.results], plot, logging_value=evaluations[0].logging_value)
        console.print(f"wrote {plot}")


def train(
    from_log: Annotated[bool, typer.Option("--from-log", help="Train from the logged decisions and propensities (the only source so far).")] = True,
    db: DbOption = None,
    learner: Annotated[str, typer.Option(help="vw, or another router that learns.")] = "vw",
    args: Annotated[str | None, typer.Option("--args", help="Learner arguments as JSON, e.g. '{\"epsilon\": 0.05}'.")] = None,
    since: Annotated[str | None, typer.Option(help="Only decisions at or after this ISO time.")] = None,
    holdout: Annotated[float, typer.Option(min=0.05, max=0.95, help="Latest share of decisions held out for evaluation.")] = 0.2,
    estimator: Annotated[str, typer.Option(help="Estimator that gates promotion.")] = "snipw",
    alpha: Annotated[float, typer.Option(min=0.001, max=0.5)] = 0.05,
    weights: Annotated[str | None, typer.Option(help="Train and evaluate on rewards re-scored under these weights.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Save the snapshot even if it does not beat the logging policy.")] = False,
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
    with run_guarded(EpisodeLog, db) as log, Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("train", total=None)
        report = run_guarded(
            train_from_log, log, learner=learner, learner_args=learner_args, since=_parse_time(since, "--since"),
            holdout=holdout, estimator=estimator, alpha=alpha, weights=reweight, force=force,
            progress=lambda i: bar.update(task, completed=i),
        )
    e = report.estimate
    console.print(
        f"trained {report.learner} on {report.n_train} decisions; held out {report.n_holdout} from {report.split_at:%Y-%m-%d %H:%M:%S}"
    )
    console.print(
        f"{e.estimator}: new policy {e.value:+.4f} [{e.ci_low:+.4f}, {e.ci_high:+.4f}] vs logging policy "
        f"{report.logging_value:+.4f} ± {report.logging_stderr:.4f}"
    )
    if report.saved_version:
        verdict = "beats the logging policy" if report.promotable else "forced, does NOT beat the logging policy"
        console.print(f"saved snapshot [bold]{report.saved_version}[/] ({verdict}); promote it from the admin view or the API")
    else:
        console.print("not saved: its lower confidence bound does not beat the logging policy (use --force to keep it anyway)")
