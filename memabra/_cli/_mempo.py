"""``memabra mempo score``: grade logged routing decisions with the MemPO scorer;
``memabra mempo labels``: what the stored labels say.

torch and transformers load only when the command runs, so the rest of the CLI starts without them.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from memabra._cli._common import JsonOutOption, console, fail, parse_time, plain, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._stops import StopSignals, exit_code, nothing_stored_if_stopped, stopped_by
from memabra._cli._tables import Table
from memabra._errors import MemabraError
from memabra._records import GoldDecision, MemoryQuality
from memabra.storage import EpisodeLog

logger = logging.getLogger("memabra")

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
) -> None:
    """Score decisions whose gold answer is known: P(gold | selected memories) against P(gold | all
    candidate memories), stored as a memory-quality signal. Each chunk is stored as it is scored,
    and decisions this scorer (--name, else mempo:DIRECTORY-NAME) has labelled are skipped, so an
    interrupted run picks up where it stopped and a nightly run scores only what is new. `memabra
    mempo labels` shows what was stored."""
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
                console.print(
                    Text(
                        f"nothing left to score: {scorer_name} has labelled every decision with a known gold "
                        "answer (--rescore scores them again)"
                    ),
                    highlight=False,
                )
            elif gold := run_guarded(log.count_gold_episodes, since=since_at):
                console.print(
                    Text(
                        f"no decisions to score: {gold} episode(s) have a gold answer, but none of their decisions "
                        "offered memories (MemPO grades memory selections; an agent without a memory slot, or a "
                        "user with no memories yet, makes none)"
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
        except KeyboardInterrupt as stop:
            fail(
                f"{stopped_by(stop)}: {scored} of {total} decisions scored and stored; {_resume}",
                code=exit_code(stop),
            )
        except MemabraError as exc:
            fail(f"{exc} ({scored} of {total} decisions scored and stored; {_resume})")
    elapsed = time.perf_counter() - started
    console.print(
        f"scored {scored} decisions: {rewards[1]} selections as good as all candidates (+1), {rewards[-1]} worse (-1); "
        f"{tokens:,} tokens in {elapsed:.1f} s = {tokens / elapsed if elapsed > 0 else 0.0:,.0f} tokens/s"
    )
    if skipped:
        fail(
            f"{len(skipped)} of {total} decisions could not be scored and were left unlabelled (first: "
            f"{skipped[0]}); the other {scored} are stored. A later run tries them again: a corrected gold "
            "answer (feedback) or a model with more positions scores them"
        )


_resume = "the same command scores the rest"


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


@dataclass(frozen=True, slots=True)
class ScorerSummary:
    """The labels one scorer stored: how many, how many +1, and the means of its probabilities."""

    scorer: str
    labels: int
    as_good: int
    worse: int
    mean_p_selected: float
    mean_p_all: float
    mean_difference: float


@dataclass(frozen=True, slots=True)
class LabelledDecision:
    """A labelled decision with its question, for the list of the worst selections."""

    decision_id: str
    scorer: str
    p_selected: float
    p_all: float
    difference: float
    question: str


@mempo_app.command("labels")
def labels(
    db: DbOption = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Only decisions whose gold answer arrived (as feedback) at or after this ISO time."
        ),
    ] = None,
    scorer: Annotated[str | None, typer.Option("--scorer", help="Only this scorer's labels (mempo:NAME).")] = None,
    worst: Annotated[
        int, typer.Option("--worst", min=0, help="List this many decisions graded -1 whose selection lost the most.")
    ] = 10,
    json_out: JsonOutOption = None,
) -> None:
    """What `memabra mempo score` stored: per scorer, how many decisions it labelled, how many
    selections did as well as all candidates (+1) and the mean probabilities; then the decisions
    whose selection lost the most probability, with their questions. Reads the decisions with a
    gold answer a chunk at a time; loads no model."""
    since_at = _since(since)
    sums: dict[str, list[float]] = {}
    # the `worst` largest losses: a min-heap on -difference, its top the mildest loss kept (a
    # decision two scorers graded -1 is there once for each)
    lowest: list[tuple[float, str, str, LabelledDecision]] = []
    decisions = labelled = 0  # labelled: decisions with a label (of any scorer, unless --scorer)
    with run_guarded(EpisodeLog, db) as log:
        for chunk in _chunked(run_guarded(log.mempo_items, since=since_at), 500):
            decisions += len(chunk)
            stored = run_guarded(log.all_memory_scores, list(chunk), scorer=scorer)
            labelled += len({label.decision_id for label in stored})
            for label in stored:
                decision_id = label.decision_id
                total = sums.setdefault(label.scorer, [0, 0, 0.0, 0.0, 0.0])
                total[0] += 1
                total[1] += label.reward == 1
                total[2] += label.p_selected
                total[3] += label.p_all
                total[4] += label.difference
                if label.reward == -1 and worst:
                    entry = LabelledDecision(
                        decision_id, label.scorer, label.p_selected, label.p_all, label.difference, chunk[decision_id]
                    )
                    heapq.heappush(lowest, (-label.difference, decision_id, label.scorer, entry))
                    if len(lowest) > worst:
                        heapq.heappop(lowest)
    summaries = [
        ScorerSummary(name, int(n), int(good), int(n - good), p_sel / n, p_all / n, diff / n)
        for name, (n, good, p_sel, p_all, diff) in sorted(sums.items())
    ]
    worst_decisions = [entry for *_, entry in sorted(lowest, key=lambda item: -item[0])]
    _print_labels(decisions, labelled, summaries, worst_decisions, scorer)
    write_json(
        json_out,
        {"decisions": decisions, "labelled": labelled, "scorers": summaries, "worst": worst_decisions},
    )


def _chunked(items: Iterator[GoldDecision], size: int) -> Iterator[dict[str, str]]:
    """Decision ids to their questions, ``size`` decisions at a time (texts are not kept)."""
    chunk: dict[str, str] = {}
    for item in items:
        chunk[item.id] = item.question
        if len(chunk) == size:
            yield chunk
            chunk = {}
    if chunk:
        yield chunk


def _print_labels(
    decisions: int,
    labelled: int,
    summaries: list[ScorerSummary],
    worst: list[LabelledDecision],
    scorer: str | None,
) -> None:
    of = f" by {scorer}" if scorer is not None else ""
    console.print(Text(f"{decisions} decisions with a known gold answer, {labelled} labelled{of}"), highlight=False)
    if not labelled:
        console.print(Text("no labels: `memabra mempo score --model PATH` stores them"), highlight=False)
        return
    table = Table(title="labels by scorer")
    for column in ("scorer", "labels", "+1", "-1", "mean P(selected)", "mean P(all)", "mean difference"):
        table.add_column(column, justify="left" if column == "scorer" else "right")
    for s in summaries:
        table.add_row(
            plain(s.scorer),
            f"{s.labels:,}",
            f"{s.as_good:,}",
            f"{s.worse:,}",
            f"{s.mean_p_selected:.4g}",
            f"{s.mean_p_all:.4g}",
            f"{s.mean_difference:+.3g}",
        )
    console.print(table)
    if worst:
        losers = Table(title=f"selections graded -1, the most probability lost first ({len(worst)} shown)")
        for column in ("decision", "scorer", "P(selected)", "P(all)", "difference", "question"):
            losers.add_column(column, justify="right" if column.startswith(("P(", "diff")) else "left")
        for d in worst:
            question = d.question if len(d.question) <= 80 else d.question[:79] + "…"
            losers.add_row(
                plain(d.decision_id),
                plain(d.scorer),
                f"{d.p_selected:.4g}",
                f"{d.p_all:.4g}",
                f"{d.difference:+.3g}",
                plain(question),
            )
        console.print(losers)
