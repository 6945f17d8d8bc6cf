"""``memabra ope log`` and ``memabra train --from-log`` (what ``ope log`` prints: ``_offline_report``)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
)
from sqlalchemy.exc import SQLAlchemyError

from memabra._cli._common import (
    STDOUT,
    JsonOutOption,
    check_json_output,
    check_output_path,
    console,
    error_line,
    fail,
    parse_time,
    run_guarded,
    transient_progress,
    write_json,
    write_output,
)
from memabra._cli._database import DbOption
from memabra._cli._offline_report import (
    effective_sample_size,
    ess_note,
    evaluations_json,
    intervals,
    invocation,
    print_evaluations,
)
from memabra._cli._policies import policy_name
from memabra._config import parse_weights
from memabra._errors import MemabraError
from memabra._records import OPEResult
from memabra.storage import EpisodeLog
from memabra.storage._engine import shown_url

if TYPE_CHECKING:
    from memabra.evals.offline import TrainReport


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


def _logged_by(values: list[str] | None) -> list[str] | None:
    """``--logged-by``'s policy names, ``module:Class`` read as its class's ``name`` (as the other
    ``--policy`` options take a router of your own); checked while the command line is parsed."""
    return [policy_name(value) or value for value in values] if values else None


LoggedByOption = Annotated[
    list[str] | None,
    typer.Option(
        "--logged-by",
        help="Only the decisions this policy logged (the router's name, or module:Class for a router of your "
        "own): one bot's traffic on a log several bots share; repeatable (any of them).",
        callback=_logged_by,
    ),
]


# how storage ends the message of a write whose connection was lost while it committed
_COMMIT_UNKNOWN = "may or may not have committed"

# what --plot writes: matplotlib's own backends, no extra package (matplotlib is imported only to draw)
_PLOT_FORMATS = (".png", ".svg", ".pdf")


def _check_plot_suffix(path: Path) -> None:
    """``--plot`` (a writable path, ``check_output_path``) must name a format the chart can be
    saved in: checked before the evaluation, so a bad one costs no work and stores nothing."""
    if path.suffix.lower() not in _PLOT_FORMATS:
        fail(
            f"--plot {path}: cannot save a chart as {path.suffix or 'a file without a suffix'}; "
            f"name a {', '.join(_PLOT_FORMATS)} file"
        )


def _check_storable(specs: list[str]) -> None:
    """Each ``--policy`` must fit the stored run's target column: found before the evaluation,
    not after minutes of it, when its rows are written."""
    from memabra._errors import InvalidRecordError
    from memabra.evals.offline._run_record import recordable
    from memabra.storage._offline import check_ope_policy

    for spec in specs:
        try:
            check_ope_policy(recordable(spec))  # stored with any secret in it masked
        except InvalidRecordError as exc:
            fail(
                f"--policy: {exc}; a stored run needs a shorter one (a module:function factory "
                "can hold the arguments), or pass --no-store"
            )


def ope_log(
    ctx: typer.Context,
    policy: Annotated[
        list[str],
        typer.Option(
            "--policy",
            help="snapshot:VERSION (snapshot:VERSION:module:Class for a router of your own), active (active:POLICY "
            "where several policies are; active:module:Class for a router of your own), a router (linear, vw, hybrid, bm25, embedding, random[:JSON args]), or one of "
            "your own (module:Class[:JSON args], module:function); repeatable.",
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
            help="Only the decisions whose ids this file lists, one per line (# starts a comment): a segment of the "
            "traffic. With --logged-by: those of them that policy logged.",
        ),
    ] = None,
    logged_by: LoggedByOption = None,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write results here ('-': to standard output, the tables to stderr).",
            callback=check_json_output,
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Save a chart of the estimates here (.png, .svg or .pdf).", callback=check_output_path),
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

    if plot is not None:
        _check_plot_suffix(plot)
    reweight = run_guarded(parse_weights, weights) if weights else None
    names = [e.strip() for e in estimators.split(",") if e.strip()] if estimators is not None else None
    if names == []:  # "" or ",": as ope arrays, not a silent run of the recommended estimators alone
        fail(f"--estimators: name at least one estimator of {', '.join(DEFAULT_ESTIMATORS)}")
    only = _decision_ids(decisions) if decisions is not None else None
    if store:
        _check_storable(policy)
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
                estimators=names if names is not None else list(DEFAULT_ESTIMATORS),
                since=parse_time(since, "--since"),
                until=parse_time(until, "--until"),
                weights=reweight,
                alpha=alpha,
                seed=seed,
                include_provisional=include_provisional,
                decision_ids=only,
                logged_by=logged_by,
                progress=lambda done: bar.update(task, completed=done),
                invocation=invocation(ctx),
            )
        # shown and written before the store: a store that fails (the database gone, a snapshot
        # pruned meanwhile) must not cost the user the minutes of evaluation it follows
        print_evaluations(evaluations, alpha, only, logged_by)
        first = evaluations[0]
        if json_out is not None:
            write_output(
                json_out, json.dumps(evaluations_json(evaluations, alpha, reweight), indent=2, allow_nan=False) + "\n"
            )
            if json_out != STDOUT:
                console.print(f"wrote {json_out}")
        if plot is not None:
            run_guarded(
                plot_estimates, [r for ev in evaluations for r in ev.results], plot, logging_value=first.logging_value
            )
            console.print(f"wrote {plot}")
        if store:
            # every target's rows in one write: a refusal of the second (its snapshot pruned
            # meanwhile) must not leave the first stored alone, reading as the whole run
            _store_results(log, [r for evaluation in evaluations for r in evaluation.results])


def _store_results(log: EpisodeLog, results: list[OPEResult]) -> None:
    """Store an ``ope log``'s rows, printed already: a failure says they were not stored, exit 1."""
    try:
        log.record_ope_results(results)
    except (MemabraError, SQLAlchemyError) as exc:
        # DatabaseUnavailableError is both: its own line names the database (password hidden)
        line = str(exc) if isinstance(exc, MemabraError) else f"database error: {error_line(exc)}"
        if _COMMIT_UNKNOWN in line:
            # the connection was lost with the COMMIT in flight: the write is the one thing not known
            runs = ", ".join(sorted({r.run_id[:8] for r in results}))
            fail(
                f"the results above may not have been stored (`memabra ope runs` lists run {runs} if they were): {line}"
            )
        fail(f"the results above were not stored in the log's OPE runs: {line}")


def train(
    ctx: typer.Context,
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
    alpha: Annotated[float, typer.Option(min=0.001, max=0.5, help="1 - confidence of the intervals.")] = 0.05,
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
    logged_by: LoggedByOption = None,
    json_out: JsonOutOption = None,
) -> None:
    """Fit a new policy from the log; keep it only if it beats the logging policy offline.
    Nothing saved is an outcome, not an error (exit 0): a scheduled job reads ``saved_version``
    from ``--json``."""
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
            logged_by=logged_by,
            invocation=invocation(ctx),
        )
    e = report.estimate
    if not report.supported:
        # --force saves it all the same: say what the verdict decides only where it decides
        refused = "" if report.saved_version else "; not saved"
        console.print(f"[bold red]unsupported[/]: {escape(report.reason)}{refused}")
    by = f" logged by {', '.join(sorted(report.logged_by))}" if report.logged_by else ""
    console.print(
        f"trained {report.learner} on {report.n_train} decisions{by}; held out {report.n_holdout} from {report.split_at:%Y-%m-%d %H:%M:%S}"
    )
    # the logging policy's mean with an interval at the same level as the estimate's
    half = NormalDist().inv_cdf(1 - alpha / 2) * report.logging_stderr
    console.print(
        f"{e.estimator}: new policy {e.value:+.4f} [{e.ci_low:+.4f}, {e.ci_high:+.4f}] vs logging policy "
        f"{report.logging_value:+.4f} [{report.logging_value - half:+.4f}, {report.logging_value + half:+.4f}] "
        f"({intervals(alpha)}){ess_note(report)}"
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
        where = ["--db", shown_url(db)] if db else []
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
    write_json(json_out, _train_json(report, half))


def _train_json(report: TrainReport, half: float) -> dict[str, Any]:
    """What ``train --json`` writes: the estimate, the gate's verdict and what was saved."""
    e, d = report.estimate, report.improvement
    return {
        "learner": report.learner,
        "n_train": report.n_train,
        "n_holdout": report.n_holdout,
        "split_at": report.split_at.isoformat(),
        "logged_by": None if report.logged_by is None else sorted(report.logged_by),
        "estimate": {"estimator": e.estimator, "value": e.value, "ci_low": e.ci_low, "ci_high": e.ci_high},
        "supported": report.supported,
        "reason": report.reason,
        "logging_policy": {
            "value": report.logging_value,
            "ci_low": report.logging_value - half,
            "ci_high": report.logging_value + half,
        },
        "improvement": None if d is None else {"value": d.value, "ci_low": d.ci_low, "ci_high": d.ci_high},
        # of the weight the estimate leans on, on the held-out decisions; null for the direct method
        "effective_sample_size": effective_sample_size(report),
        "promotable": report.promotable,
        "saved_version": report.saved_version,
    }
