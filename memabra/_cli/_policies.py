"""``memabra policies``: list, export, import, promote, roll back and prune policy snapshots."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from memabra._cli._common import (
    JsonOutOption,
    YesOption,
    check_output_path,
    cli_actor,
    confirm_or_stop,
    console,
    fail,
    run_guarded,
    write_json,
    write_output,
)
from memabra._cli._database import DbOption
from memabra._cli._tables import Table
from memabra._errors import MemabraError
from memabra._learner import DEFAULT_POLICY
from memabra._records import PolicySnapshot
from memabra._snapshot_file import IMPORTED_KEY, imported_snapshot, snapshot_document
from memabra.evals._router_paths import is_router_path, router_target
from memabra.router import Router, learned_model
from memabra.storage import AdminQueries, EpisodeLog, LearnerStore, SnapshotAudit

policies_app = typer.Typer(
    help="Policy snapshots: list, export, import, promote, roll back and prune.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def policy_name(value: str | None) -> str | None:
    """What ``--policy`` names: a policy name as given, or for ``module:Class`` (as ``memabra learner
    --policy`` takes a router of your own) its class's ``name``, the policy its snapshots are kept
    under; checked while the command line is parsed."""
    if value is None or not is_router_path(value):
        return value
    try:
        target = router_target(value)
    except MemabraError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not (isinstance(target, type) and issubclass(target, Router)):
        raise typer.BadParameter(f"{value} is not a memabra.router.Router subclass: name its class (module:Class)")
    return target.name


PolicyOption = Annotated[
    str,
    typer.Option(
        "--policy",
        help="Policy name (the router's name), or module:Class for a router of your own.",
        callback=policy_name,
    ),
]


def open_log(db: str | None) -> EpisodeLog:
    return run_guarded(EpisodeLog, db)


@policies_app.command("list")
def policies_list(db: DbOption = None, json_out: JsonOutOption = None) -> None:
    """Every snapshot: version, policy, parent, status, created, the decisions it served
    (those of the online updates that grew from it, which are not each saved, included) and, for
    an active one, the snapshot `memabra policies rollback` would make active again."""
    with open_log(db) as log:
        # without their models (megabytes each), oldest first
        snapshots = AdminQueries(log).snapshots()[::-1]
        served = LearnerStore(log.engine).decisions_served()
    rows = [
        {
            "version": s.version,
            "policy": s.policy,
            "parent": s.parent,
            "status": s.status,
            "created": s.created_at.isoformat(timespec="seconds"),
            "decisions": served.get(s.version, 0),
            # what `memabra policies rollback` would re-activate (active snapshots only)
            "rollback_to": s.rollback_to,
        }
        for s in snapshots
    ]
    table = Table("version", "policy", "parent", "status", "created", "decisions served", "rollback to")
    for r in rows:
        table.add_row(
            *(
                escape(str(r[k] if r[k] is not None else "-"))
                for k in ("version", "policy", "parent", "status", "created", "decisions", "rollback_to")
            )
        )
    console.print(table)
    known = {s.version for s in snapshots}
    for config, n in sorted(served.items()):
        if config not in known:
            console.print(f"{n} decision(s) of {escape(config)} grew from no saved snapshot")
    write_json(json_out, rows)


@policies_app.command("export")
def policies_export(
    out: Annotated[Path, typer.Option("--out", help="File to write the learned model to.", callback=check_output_path)],
    db: DbOption = None,
    version: Annotated[
        str | None, typer.Option("--version", help="Snapshot version (default: the active one).")
    ] = None,
    policy: PolicyOption = DEFAULT_POLICY,
    whole: Annotated[
        bool,
        typer.Option(
            "--whole",
            help="Write the whole snapshot (model, learner arguments, metrics, lineage) as a JSON document that "
            "`memabra policies import` stores in another log.",
        ),
    ] = False,
) -> None:
    """Write a snapshot's learned model (comparable byte for byte with ``memabra learner --replay``),
    or with ``--whole`` the snapshot itself, to move it to another log."""
    with open_log(db) as log:
        if version is None:
            version = LearnerStore(log.engine).active_version(policy)
            if version is None:
                fail(f"policy {policy!r} has no active snapshot in this log")
        snapshot = run_guarded(log.get_snapshot, version)
    if whole:
        document = json.dumps(snapshot_document(snapshot), sort_keys=True, ensure_ascii=False, allow_nan=False)
        write_output(out, (document + "\n").encode())
    else:
        write_output(out, run_guarded(learned_model, snapshot))
    console.print(f"wrote {escape(snapshot.version)} to {escape(str(out))}")


@policies_app.command("import")
def policies_import(
    file: Annotated[
        Path,
        typer.Argument(help="A snapshot document (`memabra policies export --whole`).", show_default=False),
    ],
    db: DbOption = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="module:Class of a router of your own, which the snapshot restores from (built-in policies "
            "need none).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOutOption = None,
) -> None:
    """Store a snapshot exported from another log as a candidate (`memabra policies promote` makes
    it serve). Checked whole first (format, checksum, the router restores from it); its parent is
    kept where this log holds it. Importing it again is done (exit 0, nothing written; `--json`:
    `"imported": false`); another snapshot under its version is refused."""
    from memabra._cli._production import policy_classes  # it imports this module

    classes = policy_classes(policy)[1] if policy is not None else ()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}")
    with open_log(db) as log:
        parents = [s.version for s in AdminQueries(log).snapshots()]
        snapshot = run_guarded(imported_snapshot, text, source=str(file), parents=parents, classes=classes)
        if snapshot.version in parents:
            held = run_guarded(log.get_snapshot, snapshot.version)
            if (held.policy, held.model) != (snapshot.policy, snapshot.model):
                fail(
                    f"this log holds another snapshot under version {snapshot.version!r}: nothing imported "
                    "(prune or keep it; a version names one model in every log)"
                )
            console.print(f"{escape(snapshot.version)} is already in this log: nothing imported")
            write_json(json_out, _imported_json(snapshot, imported=False, status=held.status, dropped=False))
            return
        run_guarded(log.save_snapshot, snapshot)
    note = snapshot.metrics[IMPORTED_KEY]
    dropped = snapshot.parent is None and isinstance(note, Mapping) and note.get("parent") is not None
    console.print(
        f"imported {escape(snapshot.version)} (policy {escape(snapshot.policy)}) as a candidate"
        + (" (its parent is not in this log: stored without one)" if dropped else "")
        + f"; `memabra policies promote {escape(snapshot.version)}` makes it serve"
    )
    write_json(json_out, _imported_json(snapshot, imported=True, status=snapshot.status, dropped=dropped))


def _imported_json(snapshot: PolicySnapshot, *, imported: bool, status: str, dropped: bool) -> dict[str, object]:
    """What `policies import --json` writes: the version, whether this run stored it, its status in
    the log, and its parent (null, with `parent_dropped`, where this log does not hold the parent)."""
    return {
        "version": snapshot.version,
        "policy": snapshot.policy,
        "imported": imported,
        "status": status,
        "parent": snapshot.parent,
        "parent_dropped": dropped,
    }


ReasonOption = Annotated[
    str,
    typer.Option(
        "--reason", help="Why, kept in the audit trail with who made the change (as the admin view shows it)."
    ),
]
IfActiveOption = Annotated[
    str | None,
    typer.Option(
        "--if-active",
        help="Only while this snapshot is the policy's active one (what you reviewed): refused, changing nothing, "
        "when another promote, rollback or learner publish made another active meanwhile (promote --if-active '': "
        "only while none is active).",
        show_default=False,
    ),
]


@policies_app.command("promote")
def policies_promote(
    version: Annotated[str, typer.Argument(help="The snapshot to make active (see `memabra policies list`).")],
    db: DbOption = None,
    reason: ReasonOption = "",
    if_active: IfActiveOption = None,
    json_out: JsonOutOption = None,
) -> None:
    """Make a snapshot its policy's active one, retiring the one active before; serving agents
    load it within their reload interval. Recorded in the snapshot's audit trail, like a promote
    in the admin view. A snapshot already active is left as it is (exit 0, no audit entry;
    `--json` says `"changed": false`), so a retried promote is not a failure."""
    with open_log(db) as log:
        # what it retired, as the promote's own transaction saw it: another operator's promote may
        # have landed since any read made here
        done = run_guarded(
            SnapshotAudit(log).promote,
            version,
            by=cli_actor(),
            client=socket.gethostname(),
            reason=reason,
            replacing=if_active,
        )
        checkpoint = LearnerStore(log.engine).checkpoint(done.policy)
    active, policy = escape(done.version), escape(done.policy)
    if not done.changed:
        # a retried script finds its promote done: nothing to change, and nothing to audit
        console.print(f"{active} is already the active snapshot of policy {policy}: nothing changed")
    else:
        was = f" (retired {escape(done.retired)})" if done.retired is not None else ""
        console.print(f"promoted {active}: the active snapshot of policy {policy}{was}")
        if checkpoint is not None and done.version not in (checkpoint.published, checkpoint.snapshot_version):
            console.print(
                f"the learner of policy {policy} keeps learning from its own model and now stores "
                "its snapshots as candidates, until one of them is promoted"
            )
    if done.rollback_to is not None:
        console.print(f"`memabra policies rollback --policy {policy}` returns to {escape(done.rollback_to)}")
    write_json(
        json_out,
        {
            "policy": done.policy,
            "active": done.version,
            "changed": done.changed,
            "retired": done.retired,
            "rollback_to": done.rollback_to,
            "by": cli_actor(),
            "reason": reason,
        },
    )


@policies_app.command("rollback")
def policies_rollback(
    db: DbOption = None,
    policy: PolicyOption = DEFAULT_POLICY,
    reason: ReasonOption = "",
    if_active: IfActiveOption = None,
    json_out: JsonOutOption = None,
) -> None:
    """Retire the policy's active snapshot and make active again the snapshot it replaced when it
    was promoted or published (its parent, for snapshots activated before schema revision 0011);
    audited like a rollback in the admin view. Each run goes one step back: with `--if-active`, a
    second operator rolling back the same snapshot at the same time is refused instead."""
    with open_log(db) as log:
        active = if_active if if_active is not None else LearnerStore(log.engine).active_version(policy)
        if active is None:
            fail(
                f"policy {policy!r} has no active snapshot; nothing to roll back (promote one with "
                "`memabra policies promote VERSION`)"
            )
        if if_active is not None:
            named = run_guarded(log.get_snapshot, if_active)
            if named.policy != policy:
                fail(
                    f"snapshot {if_active} is of policy {named.policy!r}, not {policy!r}: pass --policy {named.policy}"
                )
        back = run_guarded(
            SnapshotAudit(log).rollback, active, by=cli_actor(), client=socket.gethostname(), reason=reason
        )
        checkpoint = LearnerStore(log.engine).checkpoint(policy)
    console.print(f"rolled back policy {escape(policy)}: {escape(back)} is active again, {escape(active)} retired")
    if (
        checkpoint is not None
        and checkpoint.snapshot_version is not None
        and back
        not in (
            checkpoint.published,
            checkpoint.snapshot_version,
        )
    ):
        console.print(
            f"the learner of policy {escape(policy)} keeps learning from its own model and stores its snapshots "
            f"as candidates (newest: {escape(checkpoint.snapshot_version)}); {escape(back)} serves as it is, "
            "learning nothing, until a candidate is promoted"
        )
    write_json(
        json_out,
        {"policy": policy, "active": back, "retired": active, "by": cli_actor(), "reason": reason},
    )


@policies_app.command("forget-learner")
def policies_forget_learner(
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="The policy no longer learned (or module:Class for a router of your own).",
            show_default=False,
            callback=policy_name,
        ),
    ],
    db: DbOption = None,
    json_out: JsonOutOption = None,
) -> None:
    """Delete a policy's learner checkpoint: episode retention keeps every final reward until each
    policy's learner has read it, so a policy nobody learns any more holds it back for good. Its
    snapshots stay; a learner started for it later begins from the start of the log. None there is
    done, not an error (exit 0; `--json`: `"forgotten": false`)."""
    with open_log(db) as log:
        forgotten = run_guarded(log.forget_learner, policy)
    write_json(json_out, {"policy": policy, "forgotten": bool(forgotten)})
    if not forgotten:
        # a cron job rerun after a kill, or a second operator, finds it done: not a failure
        console.print(
            f"policy {escape(policy)} has no learner checkpoint in this log: nothing to forget (retention "
            "does not wait for it)"
        )
        return
    console.print(f"forgot the learner checkpoint of policy {escape(policy)}: retention no longer waits for it")


@policies_app.command("prune")
def policies_prune(
    keep: Annotated[int, typer.Option("--keep", min=1, help="Newest snapshots (and active ancestors) to keep.")],
    db: DbOption = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Only this policy's snapshots, or module:Class's (default: every policy).",
            callback=policy_name,
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be deleted; delete nothing.")] = False,
    json_out: JsonOutOption = None,
    yes: YesOption = False,
) -> None:
    """Delete old snapshots in one transaction. Kept: the newest N per policy, the active one and
    N generations above it (its ancestors and the snapshots a rollback returns to), and any
    snapshot a learner checkpoint or an OPE result names."""
    if not dry_run:
        of = f"policy {policy!r}" if policy is not None else "every policy"
        confirm_or_stop(
            f"Delete the snapshots of {of} beyond the newest {keep} (and those the active one needs)?",
            yes=yes,
            refused="nothing was deleted (--dry-run lists what would go; --yes deletes without asking)",
            only_at_a_terminal=True,
        )
    with open_log(db) as log:
        result = run_guarded(log.prune_snapshots, keep, policy=policy, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    console.print(f"{verb} {len(result.pruned)} snapshot(s), kept {len(result.kept)}")
    for version in result.pruned:
        console.print(f"  {verb} {escape(version)}")
    write_json(json_out, {"dry_run": result.dry_run, "kept": list(result.kept), "pruned": list(result.pruned)})
