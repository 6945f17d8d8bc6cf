"""``memabra rewards recompute``: re-total stored rewards under new weights (table line, JSON)."""

from __future__ import annotations

import typer

from memabra._cli._common import JsonOutOption, console, fail, parse_time, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._config import parse_weights
from memabra._feedback import retotal_rewards
from memabra.storage import EpisodeLog

__all__ = ["rewards_recompute"]


def rewards_recompute(
    weights: str = typer.Option(
        ..., help="e.g. ws=1,wr=0.35,we=0.3,wc=0.4,wl=0.15,wx=0.2,wu=0.25 (unnamed keep the spec's)."
    ),
    db: DbOption = None,
    since: str | None = typer.Option(None, help="Only episodes at or after this ISO time."),
    version: str | None = typer.Option(None, help="Reward version label to store with the new totals."),
    use_mempo: bool = typer.Option(
        False, "--use-mempo", help="Take Hm from MemPO labels where `memabra mempo score` stored one."
    ),
    mempo_scorer: str | None = typer.Option(
        None,
        "--mempo-scorer",
        help="With --use-mempo: take only this scorer's labels (mempo:NAME; needed when the log holds "
        "labels of several, `memabra mempo labels` lists them).",
    ),
    json_out: JsonOutOption = None,
) -> None:
    """Re-total stored rewards from their components under new weights.

    Works through the log a page of 1,000 episodes per transaction: stopped midway, the pages done
    keep their new totals (each reward records its weights) and running it again finishes the job.
    `--json`: the `rewards` re-totalled, how many took Hm from a MemPO label (`labelled`) and how
    many a learner had already learned under their old totals (`learned`), and the `weights`."""
    new = run_guarded(parse_weights, weights)
    if mempo_scorer is not None and not use_mempo:
        fail("--mempo-scorer names the MemPO labels to take Hm from: give it with --use-mempo")
    since_at = parse_time(since, "--since")
    with run_guarded(EpisodeLog, db) as log:
        done = run_guarded(
            retotal_rewards,
            log,
            new,
            since=since_at,
            version=version,
            use_memory_scores=use_mempo,
            memory_scorer=mempo_scorer,
        )
        scorers = run_guarded(log.memory_label_scorers) if use_mempo and not done.labelled else {}
    labelled = f" ({done.labelled} with Hm from a MemPO label)" if done.labelled else ""
    console.print(f"recomputed {done.rewards} rewards with weights {new.as_dict()}{labelled}")
    if use_mempo and not done.labelled and not scorers:
        console.print(
            "no MemPO labels stored: recomputed without them (Hm as logged); `memabra mempo score` stores them",
            highlight=False,
        )
    elif use_mempo and not done.labelled:
        console.print(
            f"no recomputed reward has a MemPO label ({mempo_scorer or next(iter(scorers))}'s labels grade "
            "decisions of other episodes, or of none left: --since, erasure, retention): Hm as logged",
            highlight=False,
        )
    if done.learned:
        # a learner reads each final reward once: re-totalled, it is not learned again
        console.print(
            f"[yellow]{done.learned} of these rewards were already learned under their old totals[/]: the "
            "online learner does not learn them again, so its model no longer equals a replay of the log "
            "(`memabra learner --replay` will differ from the committed model); offline evaluation and "
            '`memabra train --from-log` read the new totals (docs/configuration.md, "Changing the reward '
            'weights")',
            highlight=False,
        )
    write_json(
        json_out,
        {
            "rewards": done.rewards,
            "labelled": done.labelled,
            "learned": done.learned,
            "weights": new.as_dict(),
            "version": version,
            "since": since_at,
            "mempo_scorer": mempo_scorer,
        },
    )
