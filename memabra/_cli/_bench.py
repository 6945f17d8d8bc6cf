"""``memabra bench``: replay a routing-benchmark file against routers (table, JSON, PNG)."""

from __future__ import annotations

import hashlib
import io
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from memabra._cli._bench_log import close_log, explain_partial_log, open_log
from memabra._cli._common import (
    JsonOutOption,
    check_output_path,
    console,
    fail,
    run_guarded,
    write_json,
    write_output,
)
from memabra._cli._database import checked_url
from memabra._cli._stops import Stopped, StopSignals, exit_code, stopped_by

if TYPE_CHECKING:
    from memabra.evals.bench import BenchRound, RouterFactory


def bench(
    file: Annotated[
        Path,
        typer.Argument(help="A bench file (JSON Lines rounds; see shared/data/bench/README.md).", show_default=False),
    ],
    routers: Annotated[
        str,
        typer.Option(
            help="Comma-separated routers: linear (alias sklearn), vw, hybrid, bm25, embedding, random, fixed, "
            "or one of your own as module:Class or module:function (docs/custom_router.md); "
            "the first one writes --log-db."
        ),
    ] = "linear,vw,hybrid,bm25,embedding,random",
    passes: Annotated[int, typer.Option(min=1, help="Passes over the rounds, each in a seeded shuffled order.")] = 3,
    seed: Annotated[
        int | None,
        typer.Option(
            min=0, help="Seeds the round order, the unseen split and the routers [default: 0].", show_default=False
        ),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Run once per seed (0-4, 0,3,7) and report each router's median and range over them; "
            "the JSON keeps every seed's report under runs.",
            show_default=False,
        ),
    ] = None,
    lexical: Annotated[
        bool,
        typer.Option(
            "--lexical",
            help="Rank by BM25 alone, without embeddings (faster; the report's similarity says which). Otherwise "
            "the embedding model is $MEMABRA_EMBEDDING_MODEL's, else the bundled MiniLM.",
        ),
    ] = False,
    json_out: JsonOutOption = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Save a PNG learning-curve plot here (needs matplotlib).",
            show_default=False,
            callback=check_output_path,
        ),
    ] = None,
    log_db: Annotated[
        str | None,
        typer.Option(
            "--log-db",
            help="Write the first router's decisions and rewards to this episode log (a database URL), to check `memabra ope log` against the other routers' on-policy reward_mean.",
            show_default=False,
            callback=checked_url,
        ),
    ] = None,
) -> None:
    """Each round every router chooses, is rewarded with the composite reward and learns."""
    from memabra.evals.bench import (
        bench_environment,
        bench_router_params,
        load_rounds,
        parse_seeds,
        router_factories,
        run_bench,
        similarity_label,
    )

    logging.getLogger("memabra").setLevel(logging.WARNING)
    names = _router_names(routers)
    if seeds is not None:
        # one log or one plot per run is what those options mean; several seeds would mix them
        for given, option in ((log_db, "--log-db"), (plot, "--plot")):
            if given is not None:
                fail(f"{option} writes one run; give it with --seed, not --seeds")
        if seed is not None:
            fail("give either --seed or --seeds, not both")
        seed_list = run_guarded(parse_seeds, seeds)
    seed = 0 if seed is None else seed
    from memabra.router import Similarity

    rounds = run_guarded(load_rounds, file)
    # BM25 + the deployment's embedding model (MEMABRA_EMBEDDING_MODEL, else the bundled MiniLM)
    # with the embeddings extra, else (or with --lexical) BM25 alone: the figures are of the model served
    similarity = Similarity() if lexical else run_guarded(Similarity.default)
    factories = run_guarded(router_factories, names, similarity)
    prior = similarity_label(similarity)
    environment = bench_environment(similarity)
    if seeds is not None:
        _bench_seeds(file, rounds, factories, passes, seed_list, json_out, prior, environment)
        return
    params = run_guarded(bench_router_params, factories, seed)  # before the run: a failure costs none of it
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        tasks: dict[str, Any] = {}

        def advance(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"{name:>10}", total=total)
            bar.update(tasks[name], completed=done)

        expected = passes * len(rounds)
        writer = open_log(log_db, names[0], expected) if log_db else None
        finished = False
        stop: Stopped | None = None
        log_failed = False
        # a scheduler's SIGTERM (Slurm's time limit, docker stop) stops the run as Ctrl-C does: the
        # log's run row then says stopped, not running as after a SIGKILL
        try:
            with StopSignals().installed():
                report = run_guarded(
                    run_bench, rounds, factories, passes, seed, progress=advance, source=file.name, on_decision=writer
                )
            finished = True
        except Stopped as stopped:
            stop = stopped
        finally:
            if writer is not None:
                log_failed = not close_log(writer, finished)
                if not finished or log_failed:
                    explain_partial_log(finished, writer.written, expected, names[0], writer.where)
        if stop is not None:
            fail(f"{stopped_by(stop)}: the bench run stopped before it finished", code=exit_code(stop))
        if log_failed:
            raise typer.Exit(1)
    report["similarity"] = prior
    report["file_sha256"] = _sha256(file)
    report["router_params"] = params
    report["environment"] = environment
    # files first: a reader of the tables that stops early (`| head`) ends the command, and the
    # report of a long run must not go with it
    write_json(json_out, report)
    if plot is not None:
        _plot(report, plot)
    _render(report)
    _explain_missing_unseen(report["routers"], rounds)
    if writer is not None:
        console.print(Text(f"logged {writer.written} decisions of {names[0]} to {writer.where}"), highlight=False)
    if plot is not None:
        console.print(Text(f"wrote {plot}"), highlight=False)


def _bench_seeds(
    file: Path,
    rounds: Sequence[BenchRound],
    factories: Mapping[str, RouterFactory],
    passes: int,
    seed_list: tuple[int, ...],
    json_out: Path | None,
    prior: str,
    environment: dict[str, Any],
) -> None:
    from memabra.evals.bench import bench_router_params, run_bench, summarize_seeds

    reports = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        for seed in seed_list:
            tasks: dict[str, Any] = {}

            def advance(name: str, done: int, total: int, seed: int = seed, tasks: dict[str, Any] = tasks) -> None:
                if name not in tasks:
                    tasks[name] = bar.add_task(f"seed {seed} {name:>10}", total=total)
                bar.update(tasks[name], completed=done)

            params = run_guarded(bench_router_params, factories, seed)
            report = run_guarded(run_bench, rounds, factories, passes, seed, progress=advance, source=file.name)
            reports.append({**report, "similarity": prior, "router_params": params})
    summary = {
        **summarize_seeds(reports),
        "similarity": prior,
        "file_sha256": _sha256(file),
        "environment": environment,
    }
    _render_seeds(summary)
    _explain_missing_unseen(reports[0]["routers"], rounds)
    write_json(json_out, summary)


def _sha256(file: Path) -> str:
    """The file's content digest, read in blocks: runs of one name over weeks compare only where it
    matches (the report names the file by its name alone)."""
    digest = hashlib.sha256()
    with file.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _render_seeds(summary: dict[str, Any]) -> None:
    seeds = summary["seeds"]
    table = Table(
        title=f"{summary['file']}: {summary['rounds']} rounds x {summary['passes']} passes, similarity "
        f"{summary['similarity']}, {len(seeds)} seeds ({', '.join(map(str, seeds))}): median \\[min, max]"
    )
    columns = {
        "first pass": ("hit_rate_first_pass", ".3f"),
        "last pass": ("hit_rate_last_pass", ".3f"),
        "unseen": ("hit_rate_unseen", ".3f"),
        "unseen tokens": ("tokens_mean_unseen", ".0f"),
        "reward": ("reward_mean", ".3f"),
    }
    table.add_column("router")
    for column in columns:
        table.add_column(column, justify="right")
    for name, metrics in summary["summary"].items():
        cells = []
        for metric, spec in columns.values():
            m = metrics[metric]
            cells.append(
                _number(m["median"], spec)
                if not math.isfinite(m["median"])
                else f"{m['median']:{spec}} [{m['min']:{spec}}, {m['max']:{spec}}]"
            )
        table.add_row(name, *cells)
    console.print(table)


def _router_names(routers: str) -> list[str]:
    names = [n.strip() for n in routers.split(",") if n.strip()]
    if not names:
        fail(f"--routers names no router (got {routers!r}); give a comma-separated list, e.g. linear,hybrid")
    return names


def _number(value: float, spec: str) -> str:
    """``value`` formatted, or a dash where the run had nothing to compute it from (NaN)."""
    return f"{value:{spec}}" if math.isfinite(value) else "-"


def _explain_missing_unseen(routers: Mapping[str, Any], rounds: Sequence[BenchRound]) -> None:
    """Say why the unseen columns are empty, where they are: the split keeps rounds that share a
    query together, so a file with one distinct query leaves nothing to score unseen."""
    if not any(not math.isfinite(row["hit_rate_unseen"]) for row in routers.values()):
        return
    queries = len({r.query for r in rounds})
    console.print(
        Text(
            f"the unseen half is empty: {len(rounds)} round(s) with {queries} distinct query text(s), and rounds "
            "sharing a query stay on one side of the split; hit_rate_unseen and tokens_mean_unseen are null "
            "in the JSON (give rounds with different queries to measure generalisation)"
        ),
        highlight=False,
    )


def _render(report: dict[str, Any]) -> None:
    table = Table(
        title=f"{report['file']}: {report['rounds']} rounds x {report['passes']} passes, seed {report['seed']}, "
        f"unseen half {report['rounds_unseen']} rounds, similarity {report['similarity']}"
    )
    for column in (
        "router",
        "hit rate",
        "first pass",
        "last pass",
        "unseen",
        "unseen tokens",
        "reward",
        "tokens",
        "last-pass tokens",
        "ms p50",
        "ms p99",
    ):
        table.add_column(column, justify="left" if column == "router" else "right")
    for name, row in report["routers"].items():
        table.add_row(
            name,
            f"{row['hit_rate']:.3f}",
            f"{row['hit_rate_first_pass']:.3f}",
            f"{row['hit_rate_last_pass']:.3f}",
            _number(row["hit_rate_unseen"], ".3f"),
            _number(row["tokens_mean_unseen"], ".1f"),
            f"{row['reward_mean']:.3f}",
            f"{row['tokens_mean']:.1f}",
            f"{row['tokens_mean_last_pass']:.1f}",
            f"{row['decision_ms_p50']:.2f}",
            f"{row['decision_ms_p99']:.2f}",
        )
    console.print(table)


def _plot(report: dict[str, Any], path: Path) -> None:
    from memabra._plotting import pyplot

    try:
        plt = pyplot()
    except ImportError:
        fail("--plot needs matplotlib: pip install 'memabra[plots]'")
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, row in report["routers"].items():
        rounds = [p["round"] for p in row["learning_curve"]]
        axes[0].plot(rounds, [p["hit_rate"] for p in row["learning_curve"]], marker=".", label=name)
        axes[1].plot(rounds, [p["tokens_mean"] for p in row["learning_curve"]], marker=".", label=name)
    axes[0].set(xlabel="decisions", ylabel="hit rate (window)", title="hit rate")
    axes[1].set(xlabel="decisions", ylabel="tokens injected (window)", title="context cost")
    axes[0].legend(fontsize="small")
    figure.suptitle(f"{report['file']}: {report['passes']} passes, seed {report['seed']}")
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=110)
    plt.close(figure)
    write_output(path, png.getvalue())
