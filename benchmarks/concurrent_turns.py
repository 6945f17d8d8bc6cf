"""Turns per second through one agent shared by a pool of threads, against one thread.

One agent (the default linear router, BM25 similarity, a stand-in chat model that answers at once
or after ``--model-ms``, as a remote model would) serves ``--turns`` turns, each followed by its
final rating, from pools of 1, 2, 4 and 8 threads; each pool size runs ``--repeats`` times on a new
log, interleaved, and the median is reported with its ratio to one thread. A turn's own work is
mostly Python (routing, featurisation, the graph) under the GIL and the log's writes; the model's
wait is where threads overlap.

    python benchmarks/concurrent_turns.py --db-dir /tmp/ct --turns 200 --repeats 3 --model-ms 0 50
    python benchmarks/concurrent_turns.py --pg postgresql+psycopg://root@127.0.0.1:5432/test --turns 200
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _scratch import scratch_log
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from memabra import create_memabra_agent
from memabra.router import LinearRouter, Similarity
from memabra.storage import upgrade

POOLS = (1, 2, 4, 8)
USERS = 8


class _WaitingModel(BaseChatModel):
    """Answers "Noted." after ``wait_s``, like a remote model's round trip (sleeping releases the GIL)."""

    wait_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "waiting-stand-in"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if self.wait_s:
            time.sleep(self.wait_s)
        return ChatResult(generations=[ChatGeneration(message=AIMessage("Noted."))])


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@tool
def convert_units(value: float, unit: str) -> str:
    """Convert a value between metric and imperial units."""
    return f"{value} {unit}"


def _run(url: str, turns: int, workers: int, wait_s: float) -> float:
    upgrade(url)
    agent = create_memabra_agent(
        _WaitingModel(wait_s=wait_s),
        tools=[get_weather, convert_units],
        db=url,
        router=LinearRouter(seed=0, similarity=Similarity(encoder=None)),
    )
    with agent:
        for k in range(USERS):
            agent.session.memory.remember(f"u{k}", f"I live in town number {k}")
            agent.session.memory.remember(f"u{k}", "My cat is called Miso")

        def turn(i: int) -> None:
            user = f"u{i % USERS}"
            out = agent.invoke(
                {"messages": [HumanMessage("What is the weather where I live?")]},
                {"configurable": {"thread_id": f"{user}-{i}"}},
                context={"user_id": user},
            )
            agent.feedback(out["memabra_episode_id"], success=1.0, final=True)

        turn(-USERS)  # the first turn loads what every later one shares
        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(turn, range(turns)))
        return turns / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db-dir", type=Path, help="folder for the SQLite logs (one per run)")
    parser.add_argument("--pg", help="PostgreSQL URL: each run gets a schema of its own")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model-ms", type=float, nargs="+", default=[0.0], help="the model's wait per call")
    args = parser.parse_args()
    if (args.db_dir is None) == (args.pg is None):
        parser.error("give exactly one of --db-dir and --pg")
    for model_ms in args.model_ms:
        rates: dict[int, list[float]] = {n: [] for n in POOLS}
        for _ in range(args.repeats):
            for workers in POOLS:  # interleaved: the machine's drift falls on every pool size alike
                with scratch_log(args.pg, "bench", folder=args.db_dir) as url:
                    rates[workers].append(_run(url, args.turns, workers, model_ms / 1000.0))
        base = statistics.median(rates[1])
        print(f"model wait {model_ms:g} ms, {args.turns} turns, median of {args.repeats}:")
        for workers in POOLS:
            median = statistics.median(rates[workers])
            print(f"  {workers} thread(s): {median:7.1f} turns/s  ({median / base:.2f}x one thread)")


if __name__ == "__main__":
    main()
