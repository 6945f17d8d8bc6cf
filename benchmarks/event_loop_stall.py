"""How long memabra stalls the event loop, and the throughput, of K concurrent ``ainvoke`` calls.

K runs (``--runs``) of one agent go at once on one event loop, as in a FastAPI server, with the
offline stand-in chat model (``ExtractiveChatModel``) and a tool; a ticker coroutine sleeps 1 ms
in a loop and records how late it wakes (the loop's lag: how long something else held the loop).
Each statement on the log can be made slower by ``--db-ms`` (a remote database's round trip).

Two modes run in the same process, interleaved, each on a new log: ``off-loop`` is memabra as it
is; ``on-loop`` puts back the old behaviour (every ``asyncio.to_thread`` memabra makes runs inline
on the loop, and the middleware's ``before_agent`` / ``after_agent`` lose their async forms, so
langchain runs them on the loop), for the before/after ratio.

    python benchmarks/event_loop_stall.py --agent middleware --runs 100 --db-ms 0 2
    python benchmarks/event_loop_stall.py --agent builtin --runs 100 --db-ms 2
    python benchmarks/event_loop_stall.py --pg postgresql+psycopg://root@127.0.0.1:5432/test --runs 100 --db-ms 0 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _scratch import scratch_log
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from sqlalchemy import event

from memabra import MemabraAgent, MemabraMiddleware, create_memabra_agent
from memabra._agent import build_session
from memabra._standin import ExtractiveChatModel
from memabra.router import LinearRouter, Similarity
from memabra.storage import EpisodeLog, upgrade

USERS = 20
MODES = ("on-loop", "off-loop")


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


class _OnLoopMiddleware(MemabraMiddleware):
    """The middleware as it was: no async hooks, so an ``ainvoke`` runs the sync ones on the loop."""

    abefore_agent = AgentMiddleware.abefore_agent  # type: ignore[assignment]
    aafter_agent = AgentMiddleware.aafter_agent  # type: ignore[assignment]


@contextmanager
def _inline_to_thread() -> Iterator[None]:
    """``asyncio.to_thread`` run inline on the loop: memabra's off-loop calls as they were before."""
    real = asyncio.to_thread

    async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    asyncio.to_thread = inline  # type: ignore[assignment]
    try:
        yield
    finally:
        asyncio.to_thread = real


def _agent(kind: str, mode: str, log: EpisodeLog) -> MemabraAgent:
    router = LinearRouter(similarity=Similarity(encoder=None))
    model = ExtractiveChatModel()
    if kind == "builtin":
        return create_memabra_agent(model, tools=[get_weather], db=log, router=router)
    session = build_session(tools=[get_weather], db=log, router=router)
    middleware = _OnLoopMiddleware(session) if mode == "on-loop" else MemabraMiddleware(session)
    return MemabraAgent(create_agent(model, tools=[get_weather], middleware=[middleware]), session)


async def _measure(runs: list[Callable[[], Awaitable[Any]]]) -> tuple[list[float], float]:
    """The loop's lag samples (seconds) while ``runs`` go at once, and the seconds they took."""
    lags: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(max(0.0, time.perf_counter() - before - 0.001))

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    await asyncio.gather(*(run() for run in runs))
    elapsed = time.perf_counter() - started
    done.set()
    await ticker
    return lags, elapsed


def _one(kind: str, mode: str, url: str, k: int, db_ms: float) -> dict[str, float]:
    upgrade(url)
    log = EpisodeLog(url)
    agent = _agent(kind, mode, log)
    for u in range(USERS):
        agent.session.memory.remember(f"user{u}", f"I live in city{u}")

    def delay(*_: Any) -> None:
        time.sleep(db_ms / 1000.0)

    if db_ms:
        event.listen(log.engine, "before_cursor_execute", delay)
    runs = [
        lambda i=i: agent.ainvoke(
            {"messages": [HumanMessage(f"what is the weather where I live? ({i})")]},
            context={"user_id": f"user{i % USERS}"},
        )
        for i in range(k)
    ]
    try:
        if mode == "on-loop":
            with _inline_to_thread():
                lags, elapsed = asyncio.run(_measure(runs))
        else:
            lags, elapsed = asyncio.run(_measure(runs))
        logged = log.count_episodes()
    finally:
        agent.close()
        log.close()
    assert logged == k, f"{logged} of {k} runs logged"
    q = statistics.quantiles(lags, n=100, method="inclusive")
    return {"p50": q[49] * 1000, "p99": q[98] * 1000, "max": max(lags) * 1000, "runs_s": k / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agent", choices=("middleware", "builtin"), default="middleware")
    parser.add_argument("--runs", type=int, default=100, help="concurrent ainvoke calls (K)")
    parser.add_argument("--db-ms", type=float, nargs="+", default=[0.0], help="added to each statement")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pg", help="a PostgreSQL URL (a schema per run); default: SQLite in --db-dir")
    parser.add_argument("--db-dir", default=tempfile.mkdtemp(prefix="memabra-stall-"))
    args = parser.parse_args()
    print(f"{args.agent} agent, {args.runs} concurrent ainvoke, {'PostgreSQL' if args.pg else 'SQLite'}")
    print(f"{'db_ms':>6} {'mode':>9} {'lag p50 ms':>11} {'p99 ms':>8} {'max ms':>8} {'runs/s':>8}")
    for db_ms in args.db_ms:
        results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        for r in range(args.repeats):
            for mode in MODES:
                with scratch_log(args.pg or None, f"stall_{mode}{r}".replace("-", ""), folder=Path(args.db_dir)) as url:
                    results[mode].append(_one(args.agent, mode, url, args.runs, db_ms))
        medians = {m: {key: statistics.median(x[key] for x in results[m]) for key in results[m][0]} for m in MODES}
        for mode in MODES:
            m = medians[mode]
            print(f"{db_ms:6.1f} {mode:>9} {m['p50']:11.2f} {m['p99']:8.1f} {m['max']:8.1f} {m['runs_s']:8.1f}")
        before, after = medians["on-loop"], medians["off-loop"]
        print(
            f"{db_ms:6.1f} {'ratio':>9} {'':11} {before['p99'] / max(after['p99'], 1e-9):7.1f}x"
            f" {before['max'] / max(after['max'], 1e-9):7.1f}x {after['runs_s'] / before['runs_s']:7.2f}x"
        )


if __name__ == "__main__":
    main()
