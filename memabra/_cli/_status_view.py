"""What ``memabra status`` prints: the log's figures, whether the database takes writes, the
stored vectors, the policies and the reward window, then each failed check (to stderr) or the
all-clear. Split from :mod:`memabra._cli._status`, which reads the log and writes ``--json`` and
``--prometheus``."""

from __future__ import annotations

from datetime import datetime, timedelta

from rich.text import Text

from memabra._cli._common import console, err_console
from memabra._cli._status_encoder import EncoderState, encoder_line
from memabra._cli._tables import Table
from memabra._health import HealthProblem, StoredVectors, format_age
from memabra._write_check import WriteState, format_size
from memabra.storage import LogStatus, PolicyStatus, head_revision

__all__ = ["print_status"]


def print_status(
    state: LogStatus,
    where: str,
    problems: tuple[HealthProblem, ...],
    limit: timedelta,
    writes: WriteState,
    vectors: tuple[StoredVectors, ...],
    warnings: tuple[HealthProblem, ...] = (),
    encoder: EncoderState | None = None,
) -> None:
    """The status as tables and lines; ``problems`` and ``warnings`` (which fail no check) to
    stderr, each one line. ``encoder``: the embedding model this environment names (not shown when ``None``)."""
    now = state.checked_at
    head = head_revision()
    schema = "current" if state.schema_revision == head else f"head is {head}"
    lines = [
        f"database  {where} ({state.backend}, schema {state.schema_revision}, {schema})",
        f"episodes  {_episodes(state)}"
        + ("" if state.last_episode_at is None else f"; the last {_when(state.last_episode_at, now)}"),
        f"feedback  {state.open_windows:,} window(s) open, {state.overdue:,} past their end"
        + ("" if state.overdue_since is None else f"; the oldest ended {_when(state.overdue_since, now)}"),
        f"rewards   {state.unlearned:,}{'+' if state.unlearned_capped else ''} final and not learned"
        + ("" if state.unlearned_since is None else f"; the oldest final {_when(state.unlearned_since, now)}"),
    ]
    if state.paused_turns:
        lines.append(
            f"paused    {state.paused_turns:,} turn(s) waiting on an interrupt"
            + ("" if state.paused_since is None else f"; the oldest paused {_when(state.paused_since, now)}")
        )
    if state.lost_turns:
        lines.append(
            f"lost      {state.lost_turns:,} turn(s) whose process died mid-turn"
            + ("" if state.lost_since is None else f"; the oldest running since {_when(state.lost_since, now)}")
        )
    lines.append(_failed(state))
    lines.append(_writes(writes))
    lines.append(_vectors(vectors))
    if encoder is not None:
        lines.append(encoder_line(encoder, vectors))
    if state.unfinished_deletions:
        oldest = state.unfinished_deletions[0]
        lines.append(
            f"deletions {len(state.unfinished_deletions)} running or stopped part way; the longest without "
            f"progress {_when(oldest.progressed_at, now)} (`memabra episodes deletions`)"
        )
    for line in lines:
        console.print(Text(line), highlight=False)
    if state.policies:
        table = Table(title="policies", title_justify="left")
        for column in ("policy", "serving", "learner checkpoint", "learned", "lease", "not learned yet"):
            table.add_column(column, justify="right" if column == "learned" else "left")
        for p in state.policies:
            cp = p.checkpoint
            table.add_row(
                Text(p.policy),
                Text(p.active_version or "(no active snapshot)"),
                Text(
                    "none"
                    if cp is None
                    else f"{cp.snapshot_version or '-'}, committed {format_age(now - cp.updated_at)} ago"
                ),
                "-" if cp is None else f"{cp.learned:,}",
                Text("free" if p.lease is None else p.lease.describe()),
                Text(_backlog(p, now)),
            )
        console.print(table)
    else:
        console.print("no policy has a snapshot or a learner checkpoint yet")
    _print_reward_window(state)
    for warning in warnings:
        err_console.print(Text(f"! {warning.check} (a warning, not a failure): {warning.message}"), highlight=False)
    if problems:
        for problem in problems:
            err_console.print(Text(f"✗ {problem.check}: {problem.message}"), highlight=False)
    else:
        console.print(
            Text(f"✓ no reward has waited longer than {format_age(limit)}, and the database takes writes"),
            highlight=False,
        )


_WINDOW_COLUMNS = (
    "policy",
    "snapshot",
    "rewards",
    "mean reward",
    "sd",
    "success",
    "corrected",
    "missed",
    "tool errors",
)


def _print_reward_window(state: LogStatus) -> None:
    """Per policy and snapshot served, the rewards that became final in the window: each policy's
    active snapshot first, then the previous one (what a rollback re-activates), then the rest, the
    busiest first and, among as busy, the newest (most online updates) first."""
    if state.rewards_since is None:
        return
    window = format_age(state.checked_at - state.rewards_since)
    if not state.reward_window:
        console.print(Text(f"no reward became final in the last {window}"), highlight=False)
        return
    roles = {(p.policy, p.active_version): "active" for p in state.policies}
    roles.update({(p.policy, p.previous_version): "previous" for p in state.policies})
    order = {"active": 0, "previous": 1}
    rows = sorted(
        state.reward_window,
        key=lambda w: (
            w.policy,
            order.get(roles.get((w.policy, w.version), ""), 2),
            -w.rewards,
            -_online_updates(w.version),
            w.version,
        ),
    )
    table = Table(title=f"rewards final in the last {window}, per snapshot served", title_justify="left")
    for column in _WINDOW_COLUMNS:
        table.add_column(column, justify="left" if column in ("policy", "snapshot") else "right")
    for w in rows:
        role = roles.get((w.policy, w.version))
        table.add_row(
            Text(w.policy),
            Text(w.version + (f" ({role})" if role else "")),
            f"{w.rewards:,}",
            f"{w.mean_reward:+.3f}",
            f"{w.reward_stddev:.3f}",
            f"{w.mean_success:.2f}",
            f"{w.corrected_share:.1%}",
            f"{w.missed_share:.1%}",
            f"{w.tool_error_share:.1%}",
        )
    console.print(table)


def _online_updates(version: str) -> int:
    """The N of a version ``ROOT+N`` (0 for a root): a learner saves ``+100``, ``+200``, ... as it
    goes, and as text ``+1000`` sorts before ``+200``, so a run of equally busy snapshots (the
    demo's, 100 turns each) would read out of order."""
    _root, plus, updates = version.rpartition("+")
    return int(updates) if plus and updates.isdigit() else 0


def _episodes(state: LogStatus) -> str:
    if state.episodes_accuracy == "estimate":
        return f"~{state.episodes:,} (the planner's estimate; --exact counts them)"
    if state.episodes_accuracy == "at least":
        return f"{state.episodes:,}+ (counted up to there; --exact counts them all)"
    return f"{state.episodes:,}"


def _backlog(p: PolicyStatus, now: datetime) -> str:
    if not p.backlog:
        return "0"
    count = f"{p.backlog:,}{'+' if p.backlog_capped else ''}"
    text = f"{count}; the oldest final {format_age(now - p.backlog_since)}" if p.backlog_since else count
    return text + (f", {p.held_back:,}{'+' if p.held_back_capped else ''} held back" if p.held_back else "")


def _failed(state: LogStatus) -> str:
    """The failed turns of the window by cause, and the listing that shows them (its ``--since``:
    the window's start, as the count reads it)."""
    if state.failed_since is None:
        return "failed    not counted"
    window = format_age(state.checked_at - state.failed_since)
    total = sum(state.failed_turns.values())
    if not total:
        return f"failed    no turn in the last {window}"
    causes = ", ".join(f"{cause} {count:,}" for cause, count in state.failed_turns.items() if count)
    since = state.failed_since.strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"failed    {total:,} turn(s) in the last {window}: {causes} (`memabra episodes list --failed --since {since}`)"
    )


def _when(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "-"
    return f"{format_age(now - at)} ago, {at.strftime('%Y-%m-%d %H:%M:%S')}"


def _writes(writes: WriteState) -> str:
    """Whether the database takes writes, and on SQLite the room left on its volume."""
    if writes.disk_free_bytes is not None and writes.disk_total_bytes:
        share = writes.disk_free_bytes / writes.disk_total_bytes
        level = " (nearly full)" if writes.disk_critical else " (low)" if writes.disk_low else ""
        room = f"; {format_size(writes.disk_free_bytes)} free on its volume ({share:.0%}){level}"
    else:
        room = ""
    if writes.in_recovery:
        return "writes    refused: the server is a hot standby (pg_is_in_recovery)"
    if writes.transaction_read_only:
        return "writes    refused: transactions are read-only (transaction_read_only is on)"
    if writes.query_only:
        return "writes    refused: the connection is query-only (PRAGMA query_only)" + room
    if writes.uri_read_only:
        return "writes    refused: the file: URL opens it read-only (mode=ro or immutable=1)" + room
    if writes.file_writable is False or writes.folder_writable is False:
        what = "the file" if writes.file_writable is False else "its folder"
        who = f"{writes.writer or 'its writer'} (checked as root)" if writes.as_root else "this process"
        return f"writes    refused: {who} cannot write {what}" + room
    return "writes    accepted" + room


def _vectors(vectors: tuple[StoredVectors, ...]) -> str:
    """The encoder keys with stored vectors (what a model change leaves behind, until deleted)."""
    if not vectors:
        return "vectors   none stored (no encoder has embedded a text here yet)"
    counts = ", ".join(f"{v.model} {v.vectors:,}{'+' if v.capped else ''}" for v in vectors)
    return f"vectors   {counts} (stored embeddings, by encoder key)"
