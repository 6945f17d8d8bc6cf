"""What a served agent keeps per thread and per user: tracemalloc growth between two phases.

One agent (tools, ``tool_search=True``, :class:`memabra.ScriptedChatModel`, a SQLite log) serves
``--turns`` turns, each in a thread of its own for a user of its own (the shape of a month of
traffic: ids are never seen twice). Every turn fetches a tool with ``find_tools``; one turn in
``--cancel-every`` is cancelled by its caller while a tool runs (a client gone). After ``--warmup``
turns and again at the end, the allocations made by memabra's own files that are still alive are
compared: a line whose live blocks grow with the number of threads keeps something per thread.
Agents are also built and closed on one shared log (``--builds``), a graph factory's pattern.

    .venv/bin/python scripts/process_memory.py --turns 1200 --warmup 400
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import tempfile
import tracemalloc
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from memabra import ScriptedChatModel, create_memabra_agent
from memabra.router import LinearRouter, Similarity
from memabra.storage import EpisodeLog, upgrade

_OURS = ("/memabra/", "/router/", "/storage/")


@tool
async def slow_lookup(item: str) -> str:
    """Look an item up in the slow archive."""
    await asyncio.sleep(2)
    return item


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _router() -> LinearRouter:
    return LinearRouter(seed=0, similarity=Similarity(encoder=None))  # BM25: no model to load


_FIND = AIMessage("", tool_calls=[{"name": "find_tools", "args": {"query": "archive lookup"}, "id": ""}])
_SLOW = AIMessage("", tool_calls=[{"name": "slow_lookup", "args": {"item": "x"}, "id": ""}])


def _script_turn(model: ScriptedChatModel, cancelled: bool) -> None:
    """This turn's two replies: the scripted model's record of calls is emptied, so it stays small
    (it keeps every call by design: a test's record, not memabra's)."""
    script = model._script
    with script.lock:
        script.calls.clear()
        script.responses = [_FIND, _SLOW if cancelled else "answered"]


_ROOT = Path(__file__).resolve().parent.parent


def _shown(filename: str) -> str:
    """A file's path from the checkout's root, where it is under it."""
    path = Path(filename).resolve()
    return str(path.relative_to(_ROOT)) if path.is_relative_to(_ROOT) else filename


def _live(snapshot: tracemalloc.Snapshot) -> dict[str, tuple[int, int]]:
    by_line: dict[str, tuple[int, int]] = {}
    for stat in snapshot.statistics("lineno"):
        name = stat.traceback[0].filename
        if any(part in name for part in _OURS) and "_standin" not in name:
            by_line[f"{_shown(name)}:{stat.traceback[0].lineno}"] = (stat.count, stat.size)
    return by_line


async def _turns(agent: object, model: ScriptedChatModel, start: int, count: int, cancel_every: int) -> None:
    for i in range(start, start + count):
        _script_turn(model, bool(cancel_every) and i % cancel_every == cancel_every - 1)
        call = agent.ainvoke(  # type: ignore[attr-defined]
            {"messages": [HumanMessage(f"look item {i} up in the archive")]},
            {"configurable": {"thread_id": f"thread-{i}"}},
            context={"user_id": f"user-{i}"},
        )
        if cancel_every and i % cancel_every == cancel_every - 1:
            task = asyncio.ensure_future(call)
            await asyncio.sleep(0.3)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        else:
            await call


def run(args: argparse.Namespace) -> dict[str, int]:
    folder = Path(tempfile.mkdtemp())
    url = f"sqlite:///{folder / 'log.db'}"
    upgrade(url)
    log = EpisodeLog(url)
    model = ScriptedChatModel([])
    agent = create_memabra_agent(
        model, tools=[slow_lookup, weather], db=log, tool_search=True, learn=False, router=_router()
    )
    loop = asyncio.new_event_loop()
    tracemalloc.start()
    loop.run_until_complete(_turns(agent, model, 0, args.warmup, args.cancel_every))
    for _ in range(args.builds // 2):
        create_memabra_agent(ScriptedChatModel([]), db=log, learn=False, router=_router()).close()
    gc.collect()
    before = _live(tracemalloc.take_snapshot())
    loop.run_until_complete(_turns(agent, model, args.warmup, args.turns - args.warmup, args.cancel_every))
    for _ in range(args.builds - args.builds // 2):
        create_memabra_agent(ScriptedChatModel([]), db=log, learn=False, router=_router()).close()
    gc.collect()
    after = _live(tracemalloc.take_snapshot())
    tracemalloc.stop()
    agent.close()
    log.close()
    loop.close()
    return {line: after[line][0] - before.get(line, (0, 0))[0] for line in after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1200)
    parser.add_argument("--warmup", type=int, default=400)
    parser.add_argument("--cancel-every", type=int, default=4, help="0: no cancelled turn")
    parser.add_argument("--builds", type=int, default=200, help="agents built and closed on the shared log")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    runs = [run(args) for _ in range(args.runs)]
    lines = set().union(*runs)
    median = {line: statistics.median(r.get(line, 0) for r in runs) for line in lines}
    grown = sorted(((n, line) for line, n in median.items() if n > 0), reverse=True)[: args.top]
    threads = args.turns - args.warmup
    print(f"{threads} new threads and users, {args.builds} agents built on one log; live blocks gained (median):")
    for n, line in grown:
        print(f"  {n:>7,.0f}  ({n / threads:.2f} per thread)  {line}")
    print(f"  total {sum(n for n, _ in grown):,.0f} blocks in memabra's files")


if __name__ == "__main__":
    main()
