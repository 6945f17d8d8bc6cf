"""``memabra mempo score``: grade logged routing decisions with the MemPO scorer and store the
labels, a chunk at a time (``--json``: what was scored, stored and left out).

torch and transformers load only when the command runs, so the rest of the CLI starts without them.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from memabra._cli._common import JsonOutOption, console, fail, parse_time, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._stops import StopSignals, exit_code, nothing_stored_if_stopped, stopped_by
from memabra._errors import MemabraError
from memabra._records import MemoryQuality
from memabra.storage import EpisodeLog

__all__ = ["score"]

logger = logging.getLogger("memabra")


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
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="bfloat16, float16 or float32 (default: bfloat16 on CUDA, float32 on the CPU; "
            "float16 for GPUs without bfloat16).",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The scorer name labels are stored under and resumed by (default: mempo:DIRECTORY-NAME); "
            "give one when two models share a directory name.",
        ),
    ] = None,
    rescore: Annotated[
        bool,
        typer.Option(
            "--rescore",
            help="Score again the decisions this model has labelled (after retraining it in place, or a new --eps).",
        ),
    ] = False,
    json_out: JsonOutOption = None,
) -> None:
    """Score decisions whose gold answer is known: P(gold | selected memories) against P(gold | all
    candidate memories), stored as a memory-quality signal. Each chunk is stored as it is scored,
    and decisions this scorer (--name, else mempo:DIRECTORY-NAME) has labelled are skipped, so an
    interrupted run picks up where it stopped and a nightly run scores only what is new. `memabra
    mempo labels` shows what was stored. `--json`: the counts `scored` (and stored), `as_good`,
    `worse` and `unscorable`, the `scorer`, the tokens and seconds; written before the exit 1 of a
    run that left decisions unscorable, with `scored: 0` and the `reason` when there was none
    to score, and with what was stored and the `reason` `stopped` (Ctrl-C, SIGTERM) or `failed`
    when the run ended part way."""
    from memabra.evals.mempo._model_dir import check_model_directory  # torch-free

    try:
        from memabra.evals.mempo import MemPOScorer, RoutingDecisionItem
    except ImportError as exc:
        fail(str(exc))
    since_at = _since(since)
    if not model.is_dir():  # said now, not only once the log holds a gold answer to score
        fail(f"--model {model} is not a directory: give the local folder of a saved causal LM and its tokenizer")
    run_guarded(check_model_directory, model)  # config and weights there; loading waits for work
    scorer_name = _scorer_name(model, name)
    unscored_by = None if rescore else scorer_name
    stops = StopSignals()  # SIGTERM (a scheduler's stop) ends the run as Ctrl-C does, saying so
    # what the labels are stored as graded at: before any gold answer is read, so a corrected gold
    # answer that arrives while the run scores reopens its decision for the next run (stamped when
    # stored, the label would count as graded against a correction it never saw, and be skipped)
    graded_at = datetime.now(UTC)
    # the scoring says what it stored when stopped; a stop anywhere else in the block stored nothing
    with stops.installed(), run_guarded(EpisodeLog, db) as log, nothing_stored_if_stopped():
        total = run_guarded(log.count_mempo_items, since=since_at, unscored_by=unscored_by)
        if not total:
            if not rescore and run_guarded(log.count_mempo_items, since=since_at):
                reason = "all_labelled"
                console.print(
                    Text(
                        f"nothing left to score: {scorer_name} has labelled every decision with a known gold "
                        "answer (--rescore scores them again)"
                    ),
                    highlight=False,
                )
            elif gold := run_guarded(log.count_gold_episodes, since=since_at):
                reason = "no_memory_decisions"
                console.print(
                    Text(
                        f"no decisions to score: {gold} episode(s) have a gold answer, but none of their decisions "
                        "offered memories (MemPO grades memory selections; an agent without a memory slot, or a "
                        "user with no memories yet, makes none)"
                    ),
                    highlight=False,
                )
            else:
                reason = "no_gold_answers"
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
            write_json(json_out, {**_score_json(scorer_name, 0, 0, {1: 0, -1: 0}, 0, 0, 0.0), "reason": reason})
            return
        # streamed a chunk of episodes at a time: memory holds what is being scored, not the log
        items = (
            RoutingDecisionItem(g.id, g.question, g.selected, g.candidates, g.gold_answer)
            for g in log.mempo_items(since=since_at, unscored_by=unscored_by)
        )
        try:  # a large model loads for minutes: Ctrl-C then says so rather than exiting silently
            scorer = run_guarded(MemPOScorer, model, device=device, dtype=dtype, batch_size=batch_size)
        except KeyboardInterrupt as stop:
            fail(
                f"{stopped_by(stop)} while loading the model: none of {total} decisions scored or stored",
                code=exit_code(stop),
            )
        console.print(
            Text(
                f"scoring {total} decisions with {model} on {scorer.device} "
                f"({str(scorer.dtype).removeprefix('torch.')}), labels stored as {scorer_name}"
            ),
            highlight=False,
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
        scored = 0
        # a decision the model cannot score (a gold answer longer than the model) is left out, not
        # the end of the run: failing on it, every run would stop there and score nothing after it
        skipped: list[str] = []
        skips_shown = 0

        def unscorable(item: RoutingDecisionItem, reason: str) -> None:
            logger.warning("MemPO: %s; not scored", reason)
            skipped.append(reason)

        try:
            with Progress(*columns, console=console, transient=False) as progress:
                task = progress.add_task("scoring", total=total, rate="")
                chunks = scorer.score_routing_decisions(items, eps=eps, chunk_size=chunk_size, on_unscorable=unscorable)
                for scores in chunks:
                    # a gold answer corrected after its page was read brings its decision again from
                    # a later page; in one chunk, the later (the corrected answer's) grade is kept
                    chunk = list({r.id: r for r in scores}.values())
                    labels = [
                        MemoryQuality(
                            r.id,
                            scorer_name,
                            r.p_selected,
                            r.p_all,
                            r.difference,
                            r.reward,
                            r.answer_tokens,
                            scored_at=graded_at,
                        )
                        for r in chunk
                    ]
                    with stops.storing():
                        run_guarded(log.store_memory_scores, labels)
                        # counted with the store: a stop that waited for it reports this chunk whole
                        scored += len(chunk)
                        tokens += sum(result.tokens for result in scores)
                        for result in chunk:
                            rewards[result.reward] += 1
                    elapsed = time.perf_counter() - started
                    progress.update(
                        task,
                        advance=len(scores) + len(skipped) - skips_shown,
                        rate=f"{tokens / elapsed:,.0f} tok/s" if elapsed > 0 else "",
                    )
                    skips_shown = len(skipped)
        except (KeyboardInterrupt, MemabraError) as exc:
            # what was stored before the stop or the error, for the job that reads the JSON and
            # not the line (a scheduler's SIGTERM at its deadline, a database gone mid-run)
            partial = _score_json(
                scorer_name, total, scored, rewards, len(skipped), tokens, time.perf_counter() - started
            )
            write_json(
                json_out,
                {
                    **partial,
                    "device": str(scorer.device),
                    "first_unscorable": next(iter(skipped), None),
                    "reason": "stopped" if isinstance(exc, KeyboardInterrupt) else "failed",
                },
            )
            if isinstance(exc, KeyboardInterrupt):
                fail(
                    f"{stopped_by(exc)}: {scored} of {total} decisions scored and stored; {_resume}",
                    code=exit_code(exc),
                )
            fail(f"{exc} ({scored} of {total} decisions scored and stored; {_resume})")
    elapsed = time.perf_counter() - started
    console.print(
        f"scored {scored} decisions: {rewards[1]} selections as good as all candidates (+1), {rewards[-1]} worse (-1); "
        f"{tokens:,} tokens in {elapsed:.1f} s = {tokens / elapsed if elapsed > 0 else 0.0:,.0f} tokens/s"
    )
    document = _score_json(scorer_name, total, scored, rewards, len(skipped), tokens, elapsed)
    # before the exit 1 below: a nightly job reads what was stored as well as what was left out
    write_json(json_out, {**document, "device": str(scorer.device), "first_unscorable": next(iter(skipped), None)})
    if skipped:
        fail(
            f"{len(skipped)} of {total} decisions could not be scored and were left unlabelled (first: "
            f"{skipped[0]}); the other {scored} are stored. A later run tries them again: a corrected gold "
            "answer (feedback) or a model with more positions scores them"
        )


_resume = "the same command scores the rest"


def _score_json(
    scorer: str, total: int, scored: int, rewards: dict[int, int], unscorable: int, tokens: int, elapsed: float
) -> dict[str, object]:
    """What ``mempo score --json`` writes: ``total`` decisions to score this run, ``scored`` (and
    stored) of them, +1 (``as_good``) and -1 (``worse``), those the model could not score."""
    return {
        "scorer": scorer,
        "total": total,
        "scored": scored,
        "as_good": rewards[1],
        "worse": rewards[-1],
        "unscorable": unscorable,
        "tokens": tokens,
        "seconds": round(elapsed, 3),
        "tokens_per_second": round(tokens / elapsed, 1) if elapsed > 0 else None,
        "device": None,
        "first_unscorable": None,
        "reason": None,
    }


def _since(value: str | None) -> datetime | None:
    """``--since`` as a time, refused when it lies ahead: a mistyped year would otherwise read as
    "no gold answers in the log", pointing the user at their feedback instead of their typo."""
    since_at = parse_time(value, "--since")
    if since_at is not None and since_at > datetime.now(UTC):
        fail(f"--since {value} is in the future: no gold answer can have arrived since then")
    return since_at


_NAME_LIMIT = 200  # the width of the log's scorer column


def _scorer_name(model: Path, name: str | None) -> str:
    """What labels are stored under and a resumed run skips by: ``--name``, else mempo:DIRECTORY."""
    chosen = f"mempo:{model.resolve().name}" if name is None else name.strip()
    if not chosen:
        fail("--name is empty: give the name labels are stored under, or leave it out")
    if len(chosen) > _NAME_LIMIT:
        fail(
            f"the scorer name {chosen[:40]!r}… has {len(chosen)} characters, more than {_NAME_LIMIT}: give a shorter --name"
        )
    return chosen
