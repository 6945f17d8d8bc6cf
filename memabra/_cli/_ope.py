"""``memabra ope``: offline policy evaluation from obp-style arrays."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Annotated

import typer

from memabra._cli._common import STDOUT, check_json_output, console, fail, write_output
from memabra._cli._ope_online import ope_online
from memabra._cli._ope_runs import ope_runs
from memabra._cli._tables import Table
from memabra._errors import MemabraError
from memabra.evals.ope import (
    ESTIMATOR_NAMES,
    ArraysReport,
    CrossFittedRewardModel,
    EstimatorSettings,
    IntervalMethod,
    evaluate_bandit_arrays,
    load_bandit_arrays,
    make_estimators,
)

ope_app = typer.Typer(
    help="Offline policy evaluation (Open Bandit Pipeline estimators).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
ope_app.command("runs")(ope_runs)
ope_app.command("online")(ope_online)


@ope_app.command("arrays")
def ope_arrays(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="An .npz with action (n,), reward (n,), pscore (n,), action_dist (n, n_actions, len_list) and "
            "optionally position (n,), estimated_rewards (n, n_actions, len_list), context (n, d), action_context.",
        ),
    ],
    estimators: Annotated[
        str, typer.Option("--estimators", help=f"Comma-separated, from: {','.join(ESTIMATOR_NAMES)}.")
    ] = ",".join(ESTIMATOR_NAMES),
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write value, ci_low and ci_high per estimator to this file ('-': to standard output, the "
            "table to stderr).",
            callback=check_json_output,
        ),
    ] = None,
    alpha: Annotated[float, typer.Option(help="Significance level: intervals cover 1 - alpha.")] = 0.05,
    ci: Annotated[IntervalMethod, typer.Option("--ci", help="Interval method.")] = IntervalMethod.BOOTSTRAP,
    n_bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples (the library default is obp's 10000).")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed for the bootstrap and the reward model's folds.")] = 0,
    clip: Annotated[float, typer.Option(help="Importance-weight clipping threshold of ipw and dr.")] = math.inf,
    switch_lambda: Annotated[
        float, typer.Option(help="Switch-DR's threshold: DM where the weight exceeds it.")
    ] = math.inf,
    dros_lambda: Annotated[float, typer.Option(help="DRos shrinkage: 0 gives DM, inf gives DR.")] = 0.0,
    n_folds: Annotated[int, typer.Option(help="Cross-fitting folds when the file has no estimated_rewards.")] = 2,
) -> None:
    """Estimate the value of the evaluation policy in FILE with each estimator, with intervals."""
    names = [name.strip() for name in estimators.split(",") if name.strip()]
    settings = EstimatorSettings(clip_lambda=clip, switch_lambda=switch_lambda, dros_lambda=dros_lambda)
    try:
        chosen = make_estimators(names, settings)
        reward_model = CrossFittedRewardModel(n_folds=n_folds, random_state=seed)
        arrays = load_bandit_arrays(file)
    except MemabraError as exc:
        fail(str(exc))
    except (OSError, ValueError, zipfile.BadZipFile) as exc:  # not an .npz, or a pickled one
        fail(f"cannot read {file} as .npz arrays: {exc}")
    try:
        report = evaluate_bandit_arrays(
            arrays,
            chosen,
            alpha=alpha,
            method=ci,
            n_bootstrap_samples=n_bootstrap,
            random_state=seed,
            reward_model=reward_model,
        )
    except MemabraError as exc:
        fail(str(exc))
    _render(report, file)
    if json_out is not None:
        write_output(json_out, json.dumps(report.to_json_dict(), indent=2, allow_nan=False) + "\n")
        if json_out != STDOUT:
            console.print(f"wrote {json_out}")


def _render(report: ArraysReport, file: Path) -> None:
    level = f"{100 * (1 - report.alpha):g}%"
    table = Table(
        title=f"{file.name}: {report.n_rounds} rounds, {report.n_actions} actions, len_list {report.len_list}",
        caption=f"{level} intervals by {report.ci_method}; reward model: {report.reward_model}",
    )
    table.add_column("estimator")
    table.add_column("value", justify="right")
    table.add_column(f"{level} low", justify="right")
    table.add_column(f"{level} high", justify="right")
    for name, interval in report.estimates.items():
        table.add_row(name, f"{interval.value:.6f}", f"{interval.ci_low:.6f}", f"{interval.ci_high:.6f}")
    console.print(table)
    if report.diagnostics is not None:
        diagnostics = report.diagnostics
        console.print(
            f"importance weights: effective sample size {diagnostics.effective_sample_size:.1f} of {diagnostics.n_rounds}, "
            f"max {diagnostics.max_weight:.3g}, mean {diagnostics.mean_weight:.3g}, "
            f"zero in {100 * diagnostics.zero_weight_share:.1f}% of rounds",
            highlight=False,
        )
