"""``memabra simulate``: simulated users whose preferences similarity misses; each router's expected
reward against the oracle's (table, JSON)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memabra._cli._bench import _router_names
from memabra._cli._common import JsonOutOption, console, fail, run_guarded, write_json

__all__ = ["simulate_command"]

# Rounds the simulator's table averages over when --window is not given (fewer when the run is shorter).
_DEFAULT_WINDOW = 500


def simulate_command(
    rounds: Annotated[int, typer.Option(min=100, help="Rounds per router.")] = 2000,
    seed: Annotated[int, typer.Option(min=0, help="Seeds the simulated users and the routers.")] = 0,
    routers: Annotated[str, typer.Option(help="Comma-separated routers (as for bench).")] = "linear,vw,hybrid,random",
    lexical: Annotated[
        bool,
        typer.Option(
            "--lexical/--embeddings",
            help="BM25-only prior, or BM25 + the encoder (MEMABRA_EMBEDDING_MODEL, else MiniLM).",
        ),
    ] = True,
    window: Annotated[
        int | None,
        typer.Option(
            min=10, help="Final window the table reports (default: the last 500 rounds, or all).", show_default=False
        ),
    ] = None,
    json_out: JsonOutOption = None,
) -> None:
    """Simulated users whose preferences similarity misses, a drift halfway, costly decoys: each
    router's expected reward against the oracle's over the final window (`--json`: the same figures
    per router, with the run's rounds, seed, window and prior)."""
    from memabra.evals.bench import router_factories, similarity_label
    from memabra.evals.simulator import World, simulate
    from memabra.router import Similarity

    logging.getLogger("memabra").setLevel(logging.WARNING)
    if window is None:
        window = min(_DEFAULT_WINDOW, rounds)
    elif window > rounds:
        fail(f"--window {window} is longer than the run (--rounds {rounds}); give a window of at most {rounds}")
    names = _router_names(routers)
    factories = run_guarded(router_factories, names, Similarity() if lexical else None)
    # what the prior ranks by, named as bench names it (the encoder MEMABRA_EMBEDDING_MODEL sets)
    prior = run_guarded(lambda: similarity_label(Similarity() if lexical else Similarity.default()))
    world = World(seed=seed)
    played = world.rounds(rounds)
    table = Table(title=f"simulator: {rounds} rounds, seed {seed}, last {window} rounds, {prior} prior")
    for column in ("router", "reward", "oracle", "share of oracle", "tokens"):
        table.add_column(column, justify="left" if column == "router" else "right")
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        results = {}
        for name, factory in factories.items():
            task = bar.add_task(f"{name:>10}", total=rounds)
            results[name] = run_guarded(
                simulate,
                factory,
                world,
                rounds,
                rounds=played,
                seed=seed,
                progress=lambda done, _total, task=task: bar.update(task, completed=done),
            )
    figures: dict[str, dict[str, Any]] = {}
    for name, result in results.items():
        learned, oracle = result.window(rounds - window, rounds)
        tokens = float(result.tokens[-window:].mean())
        figures[name] = {
            "reward": learned,
            "oracle": oracle,
            "share_of_oracle": learned / oracle if oracle else None,
            "tokens": tokens,
        }
        # a world whose oracle earns nothing in the window has no share to give (as the JSON's null)
        share = f"{learned / oracle:.1%}" if oracle else "–"
        table.add_row(name, f"{learned:.3f}", f"{oracle:.3f}", share, f"{tokens:.0f}")
    # before the table: a reader of the table that stops early (`| head`) ends the command
    write_json(
        json_out,
        {
            "rounds": rounds,
            "seed": seed,
            "window": window,
            "similarity": prior,
            "routers": figures,
        },
    )
    console.print(table)
