"""``memabra episodes``, ``memabra rewards`` and ``memabra feedback``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from memabra._cli._common import (
    JsonOutOption,
    console,
    fail,
    parse_time,
    plain,
    run_guarded,
    write_json,
)
from memabra._cli._database import DbOption
from memabra._cli._episode_show import clip, print_episode
from memabra._cli._tables import Table
from memabra._config import load_reward_config, parse_weights
from memabra._episode_document import episode_document
from memabra._feedback import RewardService, retotal_rewards, same_feedback
from memabra._records import Feedback, FeedbackKind
from memabra.storage import (
    FAILURE_CAUSES,
    EpisodeFilter,
    EpisodeLog,
)

episodes_app = typer.Typer(
    help="Browse, export and delete logged episodes.", no_args_is_help=True, rich_markup_mode="markdown"
)
rewards_app = typer.Typer(
    help="Re-weight and finalise stored rewards.", no_args_is_help=True, rich_markup_mode="markdown"
)


EpisodeRefArgument = Annotated[
    str, typer.Argument(help="The episode's id, or its first characters (at least four) when they name one.")
]


def _open(db: str | None) -> EpisodeLog:
    return run_guarded(EpisodeLog, db)


def _cause(value: str | None) -> str | None:
    if value is not None and value not in FAILURE_CAUSES:
        raise typer.BadParameter(f"{value!r} is not a cause; use one of {', '.join(FAILURE_CAUSES)}")
    return value


@episodes_app.command("list")
def episodes_list(
    db: DbOption = None,
    user: str | None = typer.Option(None, help="Only this user's episodes."),
    thread: str | None = typer.Option(None, help="Only this conversation thread's episodes."),
    search: str | None = typer.Option(None, help="Only episodes whose query contains this text (any case)."),
    since: str | None = typer.Option(None, help="ISO time: episodes at or after."),
    until: str | None = typer.Option(None, help="ISO time: episodes before."),
    policy_version: str | None = typer.Option(None, "--policy-version", help="Only this exact policy version."),
    snapshot: str | None = typer.Option(
        None, help="Only what this saved snapshot served, its online updates included (as `policies list` counts)."
    ),
    corrected: bool | None = typer.Option(
        None,
        "--corrected/--not-corrected",
        show_default=False,
        help="Only episodes some feedback corrected (a correction, a wrong-tool verdict, a retracted memory: the reward's C), or none of them.",
    ),
    failed: bool | None = typer.Option(
        None,
        "--failed/--not-failed",
        show_default=False,
        help="Only turns logged as failed (an exception ended them, or a new message superseded them), or none of them.",
    ),
    cause: str | None = typer.Option(
        None,
        callback=_cause,
        help=f"Only failed turns of this cause: {', '.join(FAILURE_CAUSES)} (implies --failed).",
    ),
    limit: int = typer.Option(20, min=1, max=1000, help="Episodes per page."),
    cursor: str | None = typer.Option(None, help="Cursor printed under the previous page."),
    json_out: JsonOutOption = None,
) -> None:
    """List episodes, newest first."""
    if search is not None and not search.strip():
        fail("--search must not be blank (leave it out to list every query)")
    if cause is not None and failed is False:
        raise typer.BadParameter("a cause names why a turn failed: leave out --not-failed", param_hint="--cause")
    with _open(db) as log:
        page = run_guarded(
            log.list_episodes,
            EpisodeFilter(
                user_id=user,
                thread_id=thread,
                query_contains=search,
                since=parse_time(since, "--since"),
                until=parse_time(until, "--until"),
                policy_version=policy_version,
                snapshot=snapshot,
                corrected=corrected,
                failed=failed,
                failure_cause=cause,
            ),
            cursor=cursor,
            limit=limit,
            count=True,
        )
    total = f"{page.total:,}{'+' if page.total_capped else ''}"
    table = Table(title=f"episodes ({total} match)")
    table.add_column("id", no_wrap=True, min_width=32)
    for col in ("created", "user", "query", "policy", "reward", "corrected", "final", "failed"):
        table.add_column(col)
    for e in page.items:
        table.add_row(
            e.id,
            e.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            plain(e.user_id),
            plain(clip(e.query, 49)),
            plain(e.policy_version or "-"),
            "-" if e.reward_total is None else f"{e.reward_total:+.3f}",
            "yes" if e.corrected else "",
            "yes" if e.finalized else "open",
            (e.failure_cause or "yes") if e.failed else "",
        )
    console.print(table)
    if page.next_cursor:
        console.print(f"next page: --cursor {page.next_cursor}")
    rows = [
        {
            "id": e.id,
            "created": e.created_at.isoformat(),
            "user": e.user_id,
            "query": e.query,
            "policy_version": e.policy_version,
            "reward": e.reward_total,
            "corrected": e.corrected,
            "final": e.finalized,
            "failed": e.failed,
            "failure_cause": e.failure_cause,
        }
        for e in page.items
    ]
    write_json(json_out, {"episodes": rows, "next_cursor": page.next_cursor})


@episodes_app.command("show")
def episodes_show(
    episode_id: EpisodeRefArgument,
    db: DbOption = None,
    full: bool = typer.Option(
        False,
        "--full",
        help="Print the query, the answer and every step's arguments, result and error whole, as logged "
        "(else a long one is cut to its start and end, saying how much is left out).",
    ),
    json_out: JsonOutOption = None,
) -> None:
    """One episode: its decisions with every candidate, steps, feedback and reward. A long query,
    answer, result or error is printed cut unless `--full`; `--json` writes them whole."""
    with _open(db) as log:
        ep = run_guarded(log.get_episode, run_guarded(log.resolve_episode_id, episode_id))
        bodies = run_guarded(log.injected_bodies, ep)
        labels = run_guarded(log.all_memory_scores, [s.id for s in ep.selections]) if json_out else None
    print_episode(ep, bodies, full=full)
    write_json(json_out, episode_document(ep, bodies, labels=labels))


# How many unfinalisable episodes `rewards finalize` counts exactly before saying "more than".
_LEFT_OPEN_SHOWN = 1000


@rewards_app.command("recompute")
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
) -> None:
    """Re-total stored rewards from their components under new weights.

    Works through the log a page of 1,000 episodes per transaction: stopped midway, the pages done
    keep their new totals (each reward records its weights) and running it again finishes the job."""
    new = run_guarded(parse_weights, weights)
    if mempo_scorer is not None and not use_mempo:
        fail("--mempo-scorer names the MemPO labels to take Hm from: give it with --use-mempo")
    with _open(db) as log:
        done = run_guarded(
            retotal_rewards,
            log,
            new,
            since=parse_time(since, "--since"),
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


@rewards_app.command("finalize")
def rewards_finalize(db: DbOption = None, json_out: JsonOutOption = None) -> None:
    """Apply the default reward to every episode whose feedback window has passed. Exits 1 when
    some could not be finalised (`--json` still says how many were and were not)."""
    with _open(db) as log:
        n = run_guarded(RewardService(log, run_guarded(load_reward_config)).finalize_due, limit=None)
        left = len(log.due_episode_ids(limit=_LEFT_OPEN_SHOWN + 1))
    console.print(f"finalised {n} episodes")
    # before the exit 1 below: a cron job reads how many were left as well as how many went
    write_json(
        json_out,
        {"finalized": n, "left_open": min(left, _LEFT_OPEN_SHOWN), "left_open_capped": left > _LEFT_OPEN_SHOWN},
    )
    if left:
        shown = f"more than {_LEFT_OPEN_SHOWN}" if left > _LEFT_OPEN_SHOWN else str(left)
        fail(f"{shown} episode(s) past their window could not be finalised; the errors above name them")


_STATUS_NOTES = {
    # A bare "late" reads as an error to someone trying `feedback` on an episode of the demo, whose
    # rewards are all final: say what it means, after the status word scripts match.
    "late": " (the episode's reward was already final or its feedback window had closed: kept for review, "
    "never applied)",
    "duplicate": " (this idempotency key was recorded already: nothing written)",
}


def feedback(
    episode_id: EpisodeRefArgument,
    payload: Annotated[
        str, typer.Argument(help='JSON object, e.g. \'{"correct": false, "correction": "my name is Ann"}\'.')
    ],
    db: DbOption = None,
    kind: FeedbackKind = typer.Option(FeedbackKind.EXPLICIT, help="explicit, implicit or programmatic."),
    source: str = typer.Option("cli", help="Who sent it."),
    key: str | None = typer.Option(
        None,
        "--idempotency-key",
        help="Posting the same key and payload twice is a no-op; the same key with another payload is refused.",
    ),
    json_out: JsonOutOption = None,
) -> None:
    """Record feedback on an episode (joins it by id; late feedback is stored but never learned).
    Its status is `stored`, `late` (kept for review, never applied) or `duplicate` (an idempotent
    retry: nothing written); each exits 0."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        fail(f"payload is not JSON: {exc}")
    if not isinstance(data, dict):
        fail("payload must be a JSON object")
    extra = {"idempotency_key": key} if key else {}
    with _open(db) as log:
        episode_id = run_guarded(log.resolve_episode_id, episode_id)
        fb = run_guarded(Feedback, episode_id=episode_id, kind=kind, source=source, payload=data, **extra)
        receipt = run_guarded(RewardService(log, run_guarded(load_reward_config)).post_feedback, fb)
        earlier = None
        if receipt.status == "duplicate":
            stored = log.feedback_for(episode_id, include_late=True)
            earlier = next((f for f in stored if f.id == receipt.feedback_id), None)
    if earlier is not None and not same_feedback(earlier, fb):
        fail(
            f"idempotency key {key!r} already recorded other feedback on episode {episode_id} (feedback "
            f"{earlier.id}: {json.dumps(dict(earlier.payload), sort_keys=True, default=str)}); nothing was "
            "written: a retry must send the same payload, new feedback a new key"
        )
    console.print(f"feedback {receipt.feedback_id}: {receipt.status}{_STATUS_NOTES.get(receipt.status, '')}")
    # the whole episode id, where a script gave its first characters
    write_json(json_out, {"feedback_id": receipt.feedback_id, "episode_id": episode_id, "status": receipt.status})
