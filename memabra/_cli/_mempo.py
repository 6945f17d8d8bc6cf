"""``memabra mempo score``: grade logged routing decisions with the MemPO scorer (in
:mod:`memabra._cli._mempo_score`); ``memabra mempo labels``: what the stored labels say.

torch and transformers load only when the command runs, so the rest of the CLI starts without them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.text import Text

from memabra._cli._common import JsonOutOption, console, plain, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._mempo_score import _since, score
from memabra._cli._tables import Table
from memabra._records import GoldDecision
from memabra.storage import EpisodeLog

mempo_app = typer.Typer(
    help="Memory-quality labels from a local language model (the mempo extra).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


mempo_app.command("score")(score)


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
