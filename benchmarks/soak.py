"""Memory over a long run: one agent serving many turns, sampled for live objects and RSS.

One agent (the demo's tools and skills, the offline extractive stand-in model, the default
learned ``LinearRouter`` or a ``HybridRouter``, the learner in-process) serves ``--turns`` turns
for ``--users`` users, each user moving to a new thread every ``--thread-every`` turns and asking
a question worded a little differently each time (real traffic repeats few texts). A third of
the turns get a final rating, a tenth a provisional one, some a restated fact; the rest are left
for the feedback window. After ``--warmup`` turns the process is sampled ``--samples`` times:
live gc objects (after a full collection), RSS, and with ``--trace`` the sites whose allocations
grew most between the first and the last sample. ``--containers`` also lists the dicts, lists and
sets reachable from the agent (and memabra's lru_caches) that grew.

    python benchmarks/soak.py --turns 3000 --json /tmp/soak.json
    python benchmarks/soak.py --turns 3000 --db postgresql+psycopg://root@127.0.0.1:5432/test --trace
    python benchmarks/soak.py --turns 1000 --path async      # ainvoke on one event loop
    python benchmarks/soak.py --turns 1000 --path middleware # MemabraMiddleware under create_agent

A PostgreSQL URL gets a schema of its own, dropped afterwards; without ``--db`` a new SQLite file
in a temporary folder is used. Growth that levels off (caches filling to their bound) shows as
rising figures in the first samples and flat ones after; growth per turn shows as a steady rise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from memabra import Budget, CandidateKind, build_session, create_memabra_agent
from memabra._demo_world import ASSOCIATIONS, SKILLS, World, make_tools
from memabra._standin import ExtractiveChatModel, associations_from
from memabra.router import HybridRouter, LinearRouter, Router, Similarity
from memabra.storage import upgrade

_WATCHED_PACKAGES = ("memabra", "router", "storage")


@dataclass
class Sample:
    turns: int
    objects: int
    rss_mib: float
    seconds: float
    containers: dict[str, int] = field(default_factory=dict)


def _rss_mib() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the peak, where /proc is absent


def _is_ours(obj: object) -> bool:
    return type(obj).__module__.split(".", 1)[0] in _WATCHED_PACKAGES


def container_sizes(root: object, depth: int = 6) -> dict[str, int]:
    """Sizes of the dicts, lists, sets and deques reachable from ``root`` through the attributes of
    memabra's own objects (by attribute path), and of memabra's lru_caches (by function)."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()

    def walk(obj: object, path: str, left: int) -> None:
        if id(obj) in seen or left < 0:
            return
        seen.add(id(obj))
        if isinstance(obj, dict | list | set | frozenset | tuple) or type(obj).__name__ == "deque":
            if not isinstance(obj, tuple | frozenset):
                sizes[path] = len(obj)  # type: ignore[arg-type]
            values = obj.values() if isinstance(obj, dict) else obj
            for k, value in enumerate(list(values)[:50]):  # type: ignore[call-overload]
                if _is_ours(value) or isinstance(value, dict | list | set):
                    walk(value, f"{path}[{k}]", left - 1)
            return
        if not _is_ours(obj):
            return
        attrs = dict(getattr(obj, "__dict__", {}))
        for slot in getattr(type(obj), "__slots__", ()):
            with contextlib.suppress(AttributeError):
                attrs[slot] = getattr(obj, slot)
        for name, value in attrs.items():
            walk(value, f"{path}.{name}", left - 1)

    walk(root, type(root).__name__, depth)
    for name, module in list(sys.modules.items()):
        if name.split(".", 1)[0] not in ("memabra", "storage", "router") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            info = getattr(value, "cache_info", None)
            if callable(info) and getattr(value, "__module__", "") == name:
                sizes[f"{name}.{attr}()"] = info().currsize
            elif isinstance(value, dict | list | set) and not attr.startswith("__"):
                sizes[f"{name}.{attr}"] = len(value)
    return sizes


class _Traffic:
    """Who says what on each turn: the demo world's users and tasks, worded a little differently."""

    def __init__(self, users: int, thread_every: int, seed: int = 0) -> None:
        self.world = World(seed=seed, n_users=users, episodes=10**9)
        self.thread_every = thread_every
        self.rng = random.Random(seed)
        self.turns_by_user: dict[str, int] = {}

    def turn(self, index: int) -> tuple[str, str, str]:
        user, task, query = self.world.next_task(index)
        seen = self.turns_by_user.get(user.id, 0)
        self.turns_by_user[user.id] = seen + 1
        thread = f"{user.id}-{seen // self.thread_every}"
        if self.rng.random() < 0.05:  # now and then the user tells something new
            fact = self.rng.choice(list(user.facts.values()))
            return user.id, thread, f"{fact.text}, by the way (note {index})."
        return user.id, thread, f"{query} (ticket {index})"


def _router(kind: str) -> Router:
    similarity = Similarity(encoder=None)  # BM25: no embedding model to download
    return LinearRouter(seed=0, similarity=similarity) if kind == "linear" else HybridRouter(similarity=similarity)


def _build(path: str, router: str, url: str, learn: bool) -> tuple[Any, Any, Any, Callable[[], None]]:
    """(what to invoke, the session, memabra's outermost object, close) for one of the three ways
    memabra is used."""
    model = ExtractiveChatModel(associations=associations_from(ASSOCIATIONS))
    budget = Budget(max_tokens=300, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
    tools = make_tools()
    if path == "middleware":
        from langchain.agents import create_agent

        from memabra import MemabraMiddleware

        session = build_session(tools=tools, skills=SKILLS, router=_router(router), db=url, budget=budget, learn=learn)
        middleware = MemabraMiddleware(session)
        graph = create_agent(model, tools=tools, middleware=[middleware])
        return graph, session, middleware, session.close
    agent = create_memabra_agent(
        model,
        tools=tools,
        skills=SKILLS,
        router=_router(router),
        db=url,
        budget=budget,
        tool_search=True,
        learn=learn,
    )
    return agent, agent.session, agent, agent.close


def soak(args: argparse.Namespace, url: str) -> list[Sample]:
    upgrade(url)
    graph, session, ours, close = _build(args.path, args.router, url, not args.no_learn)
    traffic = _Traffic(args.users, args.thread_every)
    for user in traffic.world.users:
        for line in user.intro():
            session.memory.remember(user.id, line, source="onboarding")
    loop = asyncio.new_event_loop() if args.path == "async" else None
    rng = random.Random(1)
    failed = [0]

    def one(index: int) -> None:
        user, thread, said = traffic.turn(index)
        call = ({"messages": [HumanMessage(said)]}, {"configurable": {"thread_id": thread}})
        try:
            if loop is not None:
                out = loop.run_until_complete(graph.ainvoke(*call, context={"user_id": user}))
            else:
                out = graph.invoke(*call, context={"user_id": user})
        except ValueError:  # under create_agent a failing tool ends the run (memabra logs the turn)
            failed[0] += 1
            return
        episode = out["memabra_episode_id"]
        draw = rng.random()
        if draw < 1 / 3:
            session.feedback(episode, success=rng.random(), final=True, source="soak")
        elif draw < 1 / 3 + 1 / 10:
            session.feedback(episode, success=rng.random(), source="soak")
        elif draw < 1 / 3 + 1 / 10 + 1 / 50:
            session.feedback(episode, correct=False, correction="I live in Oslo", source="soak")

    samples: list[Sample] = []
    every = max(1, (args.turns - args.warmup) // args.samples)
    started = time.perf_counter()
    snapshots: list[tracemalloc.Snapshot] = []
    try:
        for index in range(args.turns):
            one(index)
            done = index + 1
            if done >= args.warmup and (done - args.warmup) % every == 0:
                gc.collect()
                sizes = container_sizes(ours) if args.containers else {}
                samples.append(Sample(done, len(gc.get_objects()), _rss_mib(), time.perf_counter() - started, sizes))
                print(_row(samples[-1], samples[0]), flush=True)
                if args.trace:
                    snapshots.append(tracemalloc.take_snapshot())
    finally:
        if loop is not None:
            loop.close()
        close()
    if failed[0]:
        print(f"{failed[0]} turns ended by a failing tool")
    _report_growth(samples, snapshots)
    return samples


def _row(sample: Sample, first: Sample) -> str:
    return (
        f"{sample.turns:>7} {sample.objects:>10,} {sample.objects - first.objects:>+9,} "
        f"{sample.rss_mib:>8.1f} {sample.rss_mib - first.rss_mib:>+7.1f} {sample.seconds:>8.1f}"
    )


def _report_growth(samples: list[Sample], snapshots: list[tracemalloc.Snapshot]) -> None:
    if len(samples) >= 2:
        first, last = samples[0], samples[-1]
        turns = last.turns - first.turns
        print(
            f"after warm-up: {(last.objects - first.objects) / turns:+.2f} objects/turn, "
            f"{(last.rss_mib - first.rss_mib) * 1024 / turns:+.2f} KiB RSS/turn over {turns} turns"
        )
        grew = {
            k: (first.containers.get(k, 0), v) for k, v in last.containers.items() if v > first.containers.get(k, 0)
        }
        for name, (was, now) in sorted(grew.items(), key=lambda kv: kv[1][0] - kv[1][1])[:25]:
            print(f"  grew: {name}: {was} -> {now}")
    if len(snapshots) >= 2:
        print("tracemalloc, largest growth between the first and the last sample:")
        for stat in snapshots[-1].compare_to(snapshots[0], "lineno")[:15]:
            print(f"  {stat}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--db", help="a database URL (PostgreSQL: a schema of its own); default a new SQLite file")
    parser.add_argument("--json", type=Path, help="write the samples here")
    parser.add_argument("--path", choices=("sync", "async", "middleware"), default="sync")
    parser.add_argument("--router", choices=("linear", "hybrid"), default="linear")
    parser.add_argument(
        "--no-learn", action="store_true", help="serve only, as a replica that does not hold the learner's lease"
    )
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--thread-every", type=int, default=4, help="turns a user spends in one thread")
    parser.add_argument("--warmup", type=int, help="turns before the first sample (default a tenth)")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--trace", action="store_true", help="tracemalloc: where the growth was allocated")
    parser.add_argument("--containers", action="store_true", help="list the agent's containers that grew")
    args = parser.parse_args()
    if args.turns < 2 or args.samples < 1:
        parser.error("--turns must be at least 2 and --samples at least 1")
    args.warmup = args.turns // 10 if args.warmup is None else args.warmup
    if not 0 < args.warmup < args.turns:
        parser.error("--warmup must lie between 0 and --turns")
    if args.trace:
        tracemalloc.start(1)
    print(f"{args.path} path, {args.router} router, {args.users} users, a new thread every {args.thread_every} turns")
    print(f"{'turns':>7} {'objects':>10} {'growth':>9} {'RSS MiB':>8} {'growth':>7} {'seconds':>8}")
    # here, not at the top: tests/runtime/test_soak_bounded.py loads this file as a module, without
    # benchmarks/ on sys.path
    from _scratch import scratch_log

    with scratch_log(args.db, "soak") as url:
        samples = soak(args, url)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "samples": [asdict(s) for s in samples]}, indent=1
            )
        )


if __name__ == "__main__":
    main()
