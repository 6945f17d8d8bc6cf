"""What reporting each routing decision to the run's callback handlers costs (``memabra._trace``).

    python benchmarks/trace_cost.py [--calls 2000] [--rounds 7]

Times ``trace_decision`` on one routed turn (five memories, one tool) with no handler (the
usual run outside a tracing tool: nothing is built) and with one handler that ignores what it is
told (the documents are built and handed over), beside one routing decision
(``RoutingSession.begin`` on SQLite). Prints medians over the rounds, in microseconds a decision.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from memabra._agent import build_session
from memabra._trace import trace_decision
from memabra.router import HybridRouter, Similarity


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return "sunny"


class _Ignoring(BaseCallbackHandler):
    pass


def _median_us(work: object, calls: int, rounds: int) -> float:
    timed = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            work()  # type: ignore[operator]
        timed.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        session = build_session(
            tools=[get_weather],
            db=f"sqlite:///{Path(folder) / 'trace.db'}",
            router=HybridRouter(similarity=Similarity(encoder=None)),
            learn=False,
        )
        for i in range(5):
            session.memory.remember("ann", f"I like fact number {i}")
        turn = session.begin(user_id="ann", query="weather in Paris?")
        quiet, heard = RunnableConfig(), RunnableConfig(callbacks=[_Ignoring()])
        none_us = _median_us(lambda: trace_decision(turn, quiet), args.calls, args.rounds)
        one_us = _median_us(lambda: trace_decision(turn, heard), args.calls, args.rounds)
        route_us = _median_us(
            lambda: session.begin(user_id="ann", query="weather in Paris?"), max(args.calls // 40, 1), args.rounds
        )
        session.close()
    print(f"trace, no handler:  {none_us:8.1f} us a decision")
    print(f"trace, one handler: {one_us:8.1f} us a decision")
    print(f"routing (begin):    {route_us:8.1f} us a decision")
    print(f"share of a routing decision: {none_us / route_us:.2%} (no handler), {one_us / route_us:.2%} (one)")


if __name__ == "__main__":
    main()
