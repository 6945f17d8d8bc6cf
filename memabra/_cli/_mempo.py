"""``memabra mempo score``: grade logged routing decisions with the MemPO scorer.

torch and transformers load only when the command runs, so the rest of the CLI starts without them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from memabra._cli._common import console, fail, parse_time, run_guarded
from memabra._cli._database import DbOption
from memabra._records import MemoryQuality
from memabra.storage import EpisodeLog

mempo_app = typer.Typer(
    help="Memory-quality labels from a local language model (the mempo extra).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@mempo_app.command("score")
def score(
    model: Annotated[
        Path,
        typer.Option("--model", help="Local directory of a saved causal LM and its tokenizer.", show_default=False),
    ],
    db: DbOption = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only decisions whose gold answer arrived (as feedback) at or after this ISO time; "
            "the decisions themselves may be older.",
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Sequences per forward pass.")] = 16,
    device: Annotated[str, typer.Option("--device", help="auto (CUDA when available), cpu, cuda or cuda:N.")] = "auto",
    eps: Annotated[float, typer.Option("--eps", min=0.0, help="Tolerance: +1 when P(selected) >= P(all) - eps.")] = 0.0,
    chunk_size: Annotated[int, typer.Option("--chunk-size", min=1, help="Decisions scored and stored together.")] = 256,
    rescore: Annotated[
        bool,
        typer.Option(
            "--rescore",
            help="Score again the decisions this model has labelled (after retraining it in place, or a new --eps).",
        ),
    ] = False,
) -> None:
    """Score decisions whose gold answer is known: P(gold | selected memories) against P(gold | all
    candidate memories), stored as a memory-quality signal. Each chunk is stored as it is scored,
    and decisions this model (named by its directory) has labelled are skipped, so an interrupted
    run picks up where it stopped and a nightly run scores only what is new."""
    try:
        from memabra.evals.mempo import MemPOScorer, RoutingDecisionItem
    except ImportError as exc:
        fail(str(exc))
    since_at = parse_time(since, "--since")
    if not model.is_dir():  # said now, not only once the log holds a gold answer to score
        fail(f"--model {model} is not a directory: give the local folder of a saved causal LM and its tokenizer")
    scorer_name = f"mempo:{Path(model).resolve().name}"
    unscored_by = None if rescore else scorer_name
    with run_guarded(EpisodeLog, db) as log:
        total = run_guarded(log.count_mempo_items, since=since_at, unscored_by=unscored_by)
        if not total:
            if not rescore and run_guarded(log.count_mempo_items, since=since_at):
                console.print(
                    Text(
                        f"nothing left to score: {scorer_name} has labelled every decision with a known gold "
                        "answer (--rescore scores them again)"
                    ),
                    highlight=False,
                )
            else:
                # the demo's and most agents' logs hold none: say where one comes from
                console.print(
                    Text(
                        "no decisions with a known gold answer to score"
                        + (" since --since" if since_at is not None else "")
                        + ": a gold answer arrives as feedback on its episode "
                        '(memabra feedback EPISODE_ID \'{"gold_answer": "..."}\', or agent.feedback(..., '
                        "gold_answer=...)), and only decisions that offered memories are scored"
                    ),
                    highlight=False,
                )
            return
        # streamed a chunk of episodes at a time: memory holds what is being scored, not the log
        items = (
            RoutingDecisionItem(g.id, g.question, g.selected, g.candidates, g.gold_answer)
            for g in log.mempo_items(since=since_at, unscored_by=unscored_by)
        )
        scorer = run_guarded(MemPOScorer, model, device=device, batch_size=batch_size)
        console.print(
            f"scoring {total} decisions with {model} on {scorer.device} ({str(scorer.dtype).removeprefix('torch.')})"
        )
        rewards = {1: 0, -1: 0}
        tokens = 0
        started = time.perf_counter()
        columns = (
            TextColumn("[bold]scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("scoring", total=total, rate="")
            scored = 0
            for chunk in scorer.score_routing_decisions(items, eps=eps, chunk_size=chunk_size):
                labels = [
                    MemoryQuality(r.id, scorer_name, r.p_selected, r.p_all, r.difference, r.reward, r.answer_tokens)
                    for r in chunk
                ]
                run_guarded(log.store_memory_scores, labels)
                scored += len(chunk)
                tokens += sum(result.tokens for result in chunk)
                for result in chunk:
                    rewards[result.reward] += 1
                elapsed = time.perf_counter() - started
                progress.update(task, advance=len(chunk), rate=f"{tokens / elapsed:,.0f} tok/s" if elapsed > 0 else "")
    elapsed = time.perf_counter() - started
    console.print(
        f"scored {scored} decisions: {rewards[1]} selections as good as all candidates (+1), {rewards[-1]} worse (-1); "
        f"{tokens:,} tokens in {elapsed:.1f} s = {tokens / elapsed if elapsed > 0 else 0.0:,.0f} tokens/s"
    )
