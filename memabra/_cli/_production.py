"""``memabra route`` and ``memabra learner``: the production loop by hand."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from memabra._cli._common import (
    JsonOutOption,
    check_output_path,
    configure_logging,
    console,
    fail,
    run_guarded,
    write_json,
    write_output,
)
from memabra._cli._database import DbOption
from memabra._cli._learner_loop import learn_until_stopped, learner_json, lease_holder
from memabra._cli._policies import open_log
from memabra._cli._tables import Table
from memabra._config import load_reward_config
from memabra._errors import MemabraError
from memabra._learner import DEFAULT_POLICY, Learner, fresh_router, replay
from memabra._records import Budget, CandidateKind, PolicySnapshot, RoutingContext
from memabra.evals._router_paths import is_router_path, router_target
from memabra.router import Router, default_encoder, learned_model, load_router, most_probable_slate
from memabra.storage import EpisodeLog, LearnerStore

_log = logging.getLogger("memabra")

# `memabra learner --once` when another learner holds the lease: not a failure of this run, but
# nothing was learned, and a script must be able to tell that apart from an error (exit 1).
LEASE_HELD_EXIT = 3

RouterPolicyOption = Annotated[
    str,
    typer.Option(
        "--policy",
        help="Policy name (the router's name), or module:Class for a router of your own (its snapshots "
        "restore from that class).",
    ),
]


def policy_classes(policy: str) -> tuple[str, tuple[type[Router], ...]]:
    """The policy's name and the router classes of your own its snapshots restore from: a
    ``module:Class`` path names its class's policy; a built-in name needs none."""
    if not is_router_path(policy):
        return policy, ()
    target = run_guarded(router_target, policy)
    if not (isinstance(target, type) and issubclass(target, Router)):
        fail(
            f"--policy {policy}: a learner restores snapshots from the router's class; name a "
            "memabra.router.Router subclass (module:Class), not a factory function"
        )
    return target.name, (target,)


def _describe(budget: Budget) -> str:
    tokens = "no token limit" if budget.max_tokens is None else f"{budget.max_tokens} tokens"
    slots = ", ".join(f"{k.value} {budget.slots_for(k)}" for k in CandidateKind if budget.slots_for(k))
    return f"{tokens}; slots: {slots or 'none'}"


def route(
    query: Annotated[str, typer.Argument(help="The user's message.")],
    user: Annotated[str, typer.Option("--user", help="Whose memories to route over.")],
    db: DbOption = None,
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Seed of the draw (default: the router's own).")
    ] = None,
    policy: RouterPolicyOption = DEFAULT_POLICY,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=1,
            help="Token budget of the context (default: memabra's default Budget(), what an agent built "
            "without a budget routes with).",
            show_default=False,
        ),
    ] = None,
    allowed_tools: Annotated[
        str | None,
        typer.Option(
            "--allowed-tools",
            help="Comma-separated names of the tools the run may use, as a run's allowed_tools: only those "
            "tools are offered (empty: none).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOutOption = None,
) -> None:
    """One routing decision from the command line: what would be injected, by which policy
    version, with each slot's distribution. Nothing is logged."""
    budget = Budget() if max_tokens is None else Budget(max_tokens=max_tokens)
    policy, classes = policy_classes(policy)
    with open_log(db) as log:
        version = LearnerStore(log.engine).active_version(policy)
        if version is not None:
            router = run_guarded(load_router, run_guarded(log.get_snapshot, version), classes=classes)
        else:
            router = run_guarded(fresh_router, policy, classes=classes)
        items = run_guarded(log.items, user)
    if allowed_tools is not None:
        from memabra._run_scope import SharedItems  # its tool names come from langchain_core: not at start-up

        names = [n.strip() for n in allowed_tools.split(",") if n.strip()]
        items = list(run_guarded(SharedItems(items).allowed, names))
    candidates = [item.as_candidate() for item in items]
    if not candidates:
        fail(f"user {user!r} has no memories and the log holds no shared skills or tools")
    kinds = tuple(k for k in CandidateKind if budget.slots_for(k) > 0)
    selection = run_guarded(
        router.choose, RoutingContext(query=query, user_id=user, kinds=kinds, budget=budget), candidates, seed=seed
    )
    text_of = {c.id: c.text for c in candidates}
    kind_of = {c.id: c.kind for c in candidates}
    # a draw may be an explored one; what the policy does here without exploring is its mode
    probable = run_guarded(most_probable_slate, router, selection)
    result = {
        "policy_version": selection.policy_version,
        "seed": selection.seed,
        "propensity": selection.propensity,
        "most_probable": list(probable),
        "budget": {"max_tokens": budget.max_tokens, "slots": {k.value: n for k, n in budget.slots.items()}},
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
    write_json(json_out, result)  # before the tables: a reader that stops early (`| head`) ends the command
    console.print(f"policy version [bold]{escape(selection.policy_version)}[/] (seed {selection.seed})")
    console.print(f"budget: {_describe(budget)}")
    if not any(c.kind is CandidateKind.MEMORY for c in candidates):  # a mistyped --user, often
        console.print(
            Text(
                f"user {user!r} has no memories in this log: only shared skills and tools were offered "
                f"(see `memabra memories list --user {user}`)"
            )
        )
    for c in selection.chosen:
        console.print(f"  inject {c.kind.value} {escape(c.id)}: {escape(text_of[c.id])}")
    if probable == selection.chosen_ids:
        console.print("(this draw is the policy's most probable selection)")
    else:
        console.print(
            f"this draw explored (probability {selection.propensity:.3g}); without exploring, the policy injects:"
        )
        for cid in probable:
            console.print(f"  {kind_of[cid].value} {escape(cid)}: {escape(text_of[cid])}")
        if not probable:
            console.print("  nothing")
    for d in selection.slots:
        table = Table(f"slot {d.slot} ({d.kind.value})", "p", "chosen")
        for cid, p in sorted(zip(d.candidate_ids, d.probabilities, strict=True), key=lambda t: -t[1]):
            table.add_row(escape(cid), f"{p:.3f}", "*" if cid == d.chosen_id else "")
        console.print(table)


def learner(
    db: DbOption = None,
    policy: RouterPolicyOption = DEFAULT_POLICY,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help=f"Learn what is final and not yet learned, then exit (exit {LEASE_HELD_EXIT}, learning "
            "nothing, when another learner holds the lease past --wait).",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0.0,
            help="With --once: seconds to wait for a lease held elsewhere (a crashed learner's lapses "
            "after its --lease-ttl on SQLite) before giving up.",
        ),
    ] = 0.0,
    do_replay: Annotated[
        bool, typer.Option("--replay", help="Write the model a from-scratch replay of the log produces.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="With --replay: the file to write.", show_default=False, callback=check_output_path),
    ] = None,
    commit_every: Annotated[int, typer.Option("--commit-every", min=1, help="Commit after this many rewards.")] = 100,
    commit_interval: Annotated[float, typer.Option("--commit-interval", min=0.0, help="Or this many seconds.")] = 5.0,
    lease_ttl: Annotated[
        float, typer.Option("--lease-ttl", min=0.5, help="SQLite: seconds a dead learner's lease outlives it.")
    ] = 10.0,
    poll: Annotated[float, typer.Option("--poll", min=0.05, help="Seconds between looks at the log when idle.")] = 1.0,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log what the learner does (INFO), not only warnings.")
    ] = False,
    json_out: JsonOutOption = None,
) -> None:
    """Run the policy's learner: take the lease (or stand by until it is free), learn final
    rewards in commit order, commit model and read position together. `--json` (written when it
    stops): what this run `learned`, the `lineage`'s count, the read `position` and the last
    `snapshot` it committed; with `--replay`, the `replayed` count and the file."""
    configure_logging(verbose)
    policy, classes = policy_classes(policy)
    if do_replay:
        if out is None:
            fail("--replay needs --out FILE")
        with open_log(db) as log:
            router, n = run_guarded(replay, log, policy, classes=classes)
        write_output(out, learned_model(router.snapshot()))
        console.print(f"replayed {n} final rewards into {escape(str(out))}")
        write_json(json_out, {"policy": policy, "replayed": n, "out": str(out)})
        return
    if out is not None:
        fail("--out is only for --replay")
    committed: list[PolicySnapshot] = []
    with _stop_on_sigterm(), open_log(db) as log:
        store = LearnerStore(log.engine)
        loop = Learner(
            log,
            lambda: fresh_router(policy, _learner_args(log, policy), classes=classes),
            policy=policy,
            commit_every=commit_every,
            commit_interval_s=commit_interval,
            reward_config=run_guarded(load_reward_config),
            lease_ttl=timedelta(seconds=lease_ttl),
            on_commit=committed.append,
            encoder=_served_encoder(),
        )
        try:
            if once:
                _lease_for_once(loop, store, policy, wait=wait, poll=poll, json_out=json_out)
            learn_until_stopped(loop, store, policy, once=once, poll=poll)
        finally:
            loop.close()
        # what it committed: rewards dropped (an outage, a refused commit, a restore, a stop mid-reward)
        # are learned again by whoever resumes, and counted there
        console.print(
            f"learned {loop.committed_here} rewards in this run ({loop.learned} in this lineage, earlier runs included); "
            f"{_position_text(loop)}"
        )
    write_json(json_out, learner_json(loop, committed[-1] if committed else None))


def _served_encoder() -> str | None:
    """The key of the encoder the serving processes embed with (the same setting they read:
    ``$MEMABRA_EMBEDDING_MODEL``, the config file's ``[embeddings] model``, else the bundled MiniLM),
    which the learner's snapshots record: it learns the cosines they logged. Read without loading the
    model. ``None`` (recording none) when this environment has no encoder: nothing named and the
    embeddings extra missing, or a setting naming no usable model (warned of: learning needs no model)."""
    try:
        encoder = default_encoder()
        return encoder.name if encoder is not None else None
    except (MemabraError, OSError) as exc:  # OSError: a model folder that cannot be read while it is hashed
        _log.warning("the learner's snapshots record no encoder: %s", exc)
        return None


def _position_text(loop: Learner) -> str:
    """Where the learner's read position stands: the last final reward it learned, or the log's start."""
    if loop.position.seq < 0:
        return "position: the start of the log (no final reward learned in this lineage yet)"
    return f"position {loop.position.seq}/{escape(loop.position.episode_id)}"


def _lease_for_once(
    loop: Learner, store: LearnerStore, policy: str, *, wait: float, poll: float, json_out: Path | None
) -> None:
    """Take the lease for ``--once``, waiting at most ``wait`` seconds; one line and exit
    :data:`LEASE_HELD_EXIT` when another learner still holds it (``--json`` says who, first)."""
    deadline = time.monotonic() + wait
    said = False
    while not run_guarded(loop.acquire):
        holder = lease_holder(store, policy)
        if time.monotonic() >= deadline:
            write_json(json_out, learner_json(loop, None, lease_held_by=holder))
            waited = f" after waiting {wait:g} s" if wait else " (--wait SECONDS waits for it)"
            fail(
                f"the learner lease of policy {policy!r} is held by {holder}; nothing was learned{waited}",
                code=LEASE_HELD_EXIT,
            )
        if not said:
            console.print(
                f"waiting up to {wait:g} s for the learner lease of policy {escape(policy)}, held by {escape(holder)}"
            )
            said = True
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


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
    """A new learner takes the parameters of the model the policy's agents serve (its active
    snapshot), not of a newer candidate: ``train --from-log --args`` saves one with arguments under
    trial. With none active, those of the policy's newest snapshot, if the log has one."""
    latest = log.latest_snapshot(policy, status="active") or log.latest_snapshot(policy)
    return dict(latest.learner_args) if latest is not None else None
