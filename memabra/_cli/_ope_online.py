"""``memabra ope online RUN_ID``: did a stored run's offline estimate of a snapshot come true once
agents served it? (:mod:`memabra.evals.offline._online`)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from memabra._cli._common import JsonOutOption, console, parse_time, plain, run_guarded, write_json
from memabra._cli._database import DbOption
from memabra._cli._tables import Table
from memabra.storage import EpisodeLog

if TYPE_CHECKING:  # the evaluation package imports scikit-learn: not at the CLI's start-up
    from memabra.evals.offline._online import OnlineCheck

__all__ = ["ope_online"]


def _interval(value: float, low: float, high: float) -> str:
    return f"{value:+.4f} [{low:+.4f}, {high:+.4f}]"


def _counted(check: OnlineCheck) -> str:
    """Whose decisions each side counted: on a log several bots share, the first thing to read."""
    if not check.run_read_by:
        read = "decisions of policies it did not record (its window is not recorded, or gone from the log)"
    elif check.run_chose_policies:
        read = f"the decisions {', '.join(check.run_read_by)} logged (--logged-by)"
    else:
        read = f"every policy's decisions in its window ({', '.join(check.run_read_by)})"
    which = "itself" if check.unchanged_only else "and its online updates"
    by = f" served by {check.served_by}" if check.served_by else ""
    return f"counted: offline, {read}; online, the decisions of {check.snapshot_version} {which}{by}"


def ope_online(
    run_id: Annotated[str, typer.Argument(help="The stored run (ope runs lists them; its first 8 characters do).")],
    db: DbOption = None,
    since: Annotated[
        str | None, typer.Option(help="Only decisions at or after this ISO time (default: when the run was made).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Only decisions before this ISO time.")] = None,
    unchanged_only: Annotated[
        bool,
        typer.Option(
            "--unchanged-only",
            help="Only the decisions the snapshot itself made, not its online updates (VERSION+N): the very "
            "policy the run evaluated.",
        ),
    ] = False,
    allow_reward_change: Annotated[
        bool,
        typer.Option(
            "--allow-reward-change",
            help="Compare even where the online rewards were computed under another reward version or "
            "weighting than the run read (the check says so).",
        ),
    ] = False,
    json_out: JsonOutOption = None,
) -> None:
    """Did the offline estimate come true? A stored run's estimate of a snapshot against the mean
    final reward of the decisions that snapshot served, each with its interval."""
    from memabra.evals.offline._online import check_online

    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    with run_guarded(EpisodeLog, db) as log:
        check = run_guarded(
            check_online,
            log,
            run_id,
            since=start,
            until=end,
            unchanged_only=unchanged_only,
            allow_reward_change=allow_reward_change,
        )
    level = f"{round(100 * (1 - check.alpha), 10):g}% normal intervals"
    served = f" served by {check.served_by}" if check.served_by else ""
    table = Table(
        title=f"run {check.run_id[:8]}: {check.snapshot_version} offline and online",
        caption=f"{level}; online: {check.n_online} decisions{served} with a final reward, "
        f"{check.first_decision_at:%Y-%m-%d %H:%M} → {check.last_decision_at:%Y-%m-%d %H:%M} UTC"
        + (f"; {check.n_pending} more not final yet" if check.n_pending else ""),
    )
    for column in ("", "value [interval]", "n"):
        table.add_column(column, justify="left" if not column else "right")
    off, on, d = check.offline, check.online, check.difference
    table.add_row(
        plain(f"offline ({check.estimator})"),
        plain(_interval(off.value, off.ci_low, off.ci_high)),
        plain(str(check.n_offline)),
    )
    table.add_row(plain("online mean"), plain(_interval(on.value, on.ci_low, on.ci_high)), plain(str(check.n_online)))
    table.add_row(plain("online - offline"), plain(_interval(d.value, d.ci_low, d.ci_high)), plain(""))
    console.print(table)
    console.print(Text(_counted(check)))
    inside = "inside" if check.inside else "outside"
    console.print(Text(f"the online mean lies {inside} the offline interval; verdict: {check.verdict}"))
    for note in check.notes:
        console.print(Text(f"note: {note}"))
    write_json(json_out, check.as_json())
