"""Several agent processes on one SQLite file: do any writes fail?

    python benchmarks/sqlite_processes.py [--processes 3] [--turns 80]

Each process builds the default agent (VW router, SQL memory, the offline stand-in model) on the
same SQLite file and runs ``turns`` turns: ``invoke`` (route, log the episode, learn what is
final), then ``agent.feedback`` on the episode just logged. It counts every call that raised,
and how many raised ``database is locked``. Loopback only, bounded by ``--turns``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from collections import Counter
from typing import Any


def _worker(url: str, seed: int, turns: int, out: Any) -> None:
    from langchain_core.messages import HumanMessage

    from memabra._agent import create_memabra_agent
    from memabra._standin import ExtractiveChatModel

    counts: Counter[str] = Counter()
    try:
        agent = create_memabra_agent(ExtractiveChatModel(), db=url)
    except Exception as exc:  # building the agent writes too (tools and skills into the registry)
        counts["setup failed"] += 1
        counts["locked"] += "database is locked" in str(exc)
        out.put(dict(counts))
        return
    user = {"user_id": f"user{seed % 2}"}  # processes share users: same registry rows
    for turn in range(turns):
        episode_id = None
        try:
            result = agent.invoke(
                {"messages": [HumanMessage(f"I live in city {turn % 7}; what should I cook tonight?")]},
                {"configurable": {"thread_id": f"p{seed}-t{turn % 5}"}},
                context=user,
            )
            episode_id = result["memabra_episode_id"]
            counts["invoke ok"] += 1
        except Exception as exc:  # counted, not raised: the figure is how many fail
            counts["invoke failed"] += 1
            counts["locked"] += "database is locked" in str(exc)
        if episode_id is not None:
            try:
                agent.feedback(episode_id, rating=1 + (turn + seed) % 5)
                counts["feedback ok"] += 1
            except Exception as exc:
                counts["feedback failed"] += 1
                counts["locked"] += "database is locked" in str(exc)
    out.put(dict(counts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--turns", type=int, default=80)
    args = parser.parse_args()
    from memabra.storage import upgrade

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/shared.db"
        upgrade(url)
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        t0 = time.perf_counter()
        procs = [ctx.Process(target=_worker, args=(url, i, args.turns, out)) for i in range(args.processes)]
        for p in procs:
            p.start()
        total: Counter[str] = Counter()
        for _ in procs:
            total.update(out.get(timeout=1800))
        for p in procs:
            p.join()
        elapsed = time.perf_counter() - t0
    calls = args.processes * args.turns
    print(f"{args.processes} processes x {args.turns} turns on one SQLite file, {elapsed:.0f} s")
    print(f"invoke   ok {total['invoke ok']}/{calls}, failed {total['invoke failed']}")
    print(f"feedback ok {total['feedback ok']}/{calls}, failed {total['feedback failed']}")
    print(f"agent setup failed in {total['setup failed']} of {args.processes} processes")
    print(f"'database is locked' reaching a caller: {total['locked']}")


if __name__ == "__main__":
    main()
