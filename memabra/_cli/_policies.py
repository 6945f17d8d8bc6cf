"""``memabra policies``, ``memabra route`` and ``memabra learner``: the production loop by hand."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from memabra._cli._common import DbOption, configure_logging, console, fail, run_guarded
from memabra._config import load_reward_config
from memabra._learner import DEFAULT_POLICY, Learner, fresh_router, replay
from memabra._records import Budget, CandidateKind, RoutingContext
from memabra.router import learned_model, load_router
from memabra.storage import EpisodeLog, LearnerStore

policies_app = typer.Typer(help="Policy snapshots: list, export and prune.", no_args_is_help=True)

PolicyOption = Annotated[str, typer.Option("--policy", help="Policy name (the router's name).")]
JsonOption = Annotated[Path | None, typer.Option("--json", help="Also write the result as JSON to this file.")]


def _open(db: str | None) -> EpisodeLog:
    return run_guarded(EpisodeLog, db)


def _check_out(path: Path | None, option: str) -> None:
    # Checked before any work: a bad path must not cost a whole run.
    if path is not None and not path.parent.is_dir():
        fail(f"{option}: folder {path.parent} does not exist")


def _write_json(path: Path | None, value: Any) -> None:
    if path is not None:
        path.write_text(json.dumps(value, indent=2, default=str) + "\n")
        console.print(f"wrote {escape(str(path))}")


@policies_app.command("list")
def policies_list(db: DbOption = None, json_out: JsonOption = None) -> None:
    """Every snapshot: version, policy, parent, status, created, decisions served."""
    _check_out(json_out, "--json")
    with _open(db) as log:
        snapshots = log.list_snapshots()
        served = LearnerStore(log.engine).decisions_served()
    rows = [
        {
            "version": s.version,
            "policy": s.policy,
            "parent": s.parent,
            "status": s.status,
            "created": s.created_at.isoformat(timespec="seconds"),
            "decisions": served.get(s.version, 0),
        }
        for s in snapshots
    ]
    table = Table("version", "policy", "parent", "status", "created", "decisions served")
    for r in rows:
        table.add_row(
            *(
                escape(str(r[k] if r[k] is not None else "-"))
                for k in ("version", "policy", "parent", "status", "created", "decisions")
            )
        )
    console.print(table)
    _write_json(json_out, rows)


@policies_app.command("export")
def policies_export(
    out: Annotated[Path, typer.Option("--out", help="File to write the learned model to.")],
    db: DbOption = None,
    version: Annotated[
        str | None, typer.Option("--version", help="Snapshot version (default: the active one).")
    ] = None,
    policy: PolicyOption = DEFAULT_POLICY,
) -> None:
    """Write a snapshot's learned model (comparable byte for byte with ``memabra learner --replay``)."""
    _check_out(out, "--out")
    with _open(db) as log:
        if version is None:
            version = LearnerStore(log.engine).active_version(policy)
            if version is None:
                fail(f"policy {policy!r} has no active snapshot in this log")
        snapshot = run_guarded(log.get_snapshot, version)
    out.write_bytes(run_guarded(learned_model, snapshot))
    console.print(f"wrote {escape(snapshot.version)} to {escape(str(out))}")


@policies_app.command("prune")
def policies_prune(
    keep: Annotated[int, typer.Option("--keep", min=1, help="Newest snapshots (and active ancestors) to keep.")],
    db: DbOption = None,
    policy: Annotated[
        str | None, typer.Option("--policy", help="Only this policy's snapshots (default: every policy).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be deleted; delete nothing.")] = False,
    json_out: JsonOption = None,
) -> None:
    """Delete old snapshots in one transaction. Kept: the newest N per policy, the active one and
    N generations of its ancestors, and any snapshot a learner checkpoint or an OPE result names."""
    _check_out(json_out, "--json")
    with _open(db) as log:
        result = run_guarded(log.prune_snapshots, keep, policy=policy, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    console.print(f"{verb} {len(result.pruned)} snapshot(s), kept {len(result.kept)}")
    for version in result.pruned:
        console.print(f"  {verb} {escape(version)}")
    _write_json(json_out, {"dry_run": result.dry_run, "kept": list(result.kept), "pruned": list(result.pruned)})


def route(
    query: Annotated[str, typer.Argument(help="The user's message.")],
    user: Annotated[str, typer.Option("--user", help="Whose memories to route over.")],
    db: DbOption = None,
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Seed of the draw (default: the router's own).")
    ] = None,
    policy: PolicyOption = DEFAULT_POLICY,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=1, help="Token budget of the context.")
    ] = Budget().max_tokens or 2000,
    json_out: JsonOption = None,
) -> None:
    """One routing decision from the command line: what would be injected, by which policy
    version, with each slot's distribution. Nothing is logged."""
    _check_out(json_out, "--json")
    with _open(db) as log:
        version = LearnerStore(log.engine).active_version(policy)
        router = load_router(log.get_snapshot(version)) if version is not None else run_guarded(fresh_router, policy)
        items = run_guarded(log.items, user)
    candidates = [item.as_candidate() for item in items]
    if not candidates:
        fail(f"user {user!r} has no memories and the log holds no shared skills or tools")
    budget = Budget(max_tokens=max_tokens)
    kinds = tuple(k for k in CandidateKind if budget.slots_for(k) > 0)
    selection = router.choose(
        RoutingContext(query=query, user_id=user, kinds=kinds, budget=budget), candidates, seed=seed
    )
    text_of = {c.id: c.text for c in candidates}
    result = {
        "policy_version": selection.policy_version,
        "seed": selection.seed,
        "injected": [{"id": c.id, "kind": c.kind.value, "text": c.text} for c in selection.chosen],
        # why: the similarity prior's z-score next to the router's score (the prior plus what it learned)
        "offered": [
            {
                "id": sc.candidate.id,
                "kind": sc.candidate.kind.value,
                "similarity": sc.features.get("hyb_z"),
                "score": sc.score,
                "rank": sc.rank,
            }
            for sc in selection.offered
        ],
        "slots": [
            {
                "slot": d.slot,
                "kind": d.kind.value,
                "chosen": d.chosen_id,
                "distribution": dict(zip(d.candidate_ids, d.probabilities, strict=True)),
            }
            for d in selection.slots
        ],
    }
    console.print(f"policy version [bold]{escape(selection.policy_version)}[/] (seed {selection.seed})")
    for c in selection.chosen:
        console.print(f"  inject {c.kind.value} {escape(c.id)}: {escape(text_of[c.id])}")
    for d in selection.slots:
        table = Table(f"slot {d.slot} ({d.kind.value})", "p", "chosen")
        for cid, p in sorted(zip(d.candidate_ids, d.probabilities, strict=True), key=lambda t: -t[1]):
            table.add_row(escape(cid), f"{p:.3f}", "*" if cid == d.chosen_id else "")
        console.print(table)
    _write_json(json_out, result)


def learner(
    db: DbOption = None,
    policy: PolicyOption = DEFAULT_POLICY,
    once: Annotated[bool, typer.Option("--once", help="Learn what is final and not yet learned, then exit.")] = False,
    do_replay: Annotated[
        bool, typer.Option("--replay", help="Write the model a from-scratch replay of the log produces.")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="With --replay: the file to write.")] = None,
    commit_every: Annotated[int, typer.Option("--commit-every", min=1, help="Commit after this many rewards.")] = 100,
    commit_interval: Annotated[float, typer.Option("--commit-interval", min=0.0, help="Or this many seconds.")] = 5.0,
    lease_ttl: Annotated[
        float, typer.Option("--lease-ttl", min=0.5, help="SQLite: seconds a dead learner's lease outlives it.")
    ] = 10.0,
    poll: Annotated[float, typer.Option("--poll", min=0.05, help="Seconds between looks at the log when idle.")] = 1.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the policy's learner: take the lease (or wait for it as a standby), learn final rewards
    in commit order, commit model and read position together."""
    configure_logging(verbose)
    if do_replay:
        if out is None:
            fail("--replay needs --out FILE")
        _check_out(out, "--out")
        with _open(db) as log:
            router, n = run_guarded(replay, log, policy)
        out.write_bytes(learned_model(router.snapshot()))
        console.print(f"replayed {n} final rewards into {escape(str(out))}")
        return
    from datetime import timedelta

    with _stop_on_sigterm(), _open(db) as log:
        loop = Learner(
            log,
            lambda: fresh_router(policy, _learner_args(log, policy)),
            policy=policy,
            commit_every=commit_every,
            commit_interval_s=commit_interval,
            reward_config=run_guarded(load_reward_config),
            lease_ttl=timedelta(seconds=lease_ttl),
        )
        if once:
            import time

            # A standby waits for the lease (a dead holder's lapses after --lease-ttl on SQLite).
            while not loop.acquire():
                time.sleep(poll)
        try:
            n = loop.run(once=once, poll_s=poll)
        except KeyboardInterrupt:
            n = loop.learned
        finally:
            loop.close()
        console.print(f"learned {n} rewards; position {loop.position.seq}/{escape(loop.position.episode_id)}")


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (what systemd, Kubernetes and ``docker stop`` send) stops the learner like Ctrl-C:
    it commits what it learned and releases the lease, so the standby takes over at once. SIGINT is
    set too: a process started in the background by a shell inherits it ignored."""

    def _interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _learner_args(log: EpisodeLog, policy: str) -> dict[str, Any] | None:
    """A new learner takes the parameters of the policy's newest snapshot, if the log has one."""
    latest = log.latest_snapshot(policy)
    return dict(latest.learner_args) if latest is not None else None
