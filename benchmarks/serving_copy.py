"""What serving pays to follow the in-process learner (not a test).

After every reward the in-process learner learns, serving swaps in a copy of the learner's model
(``memabra._serving``), on the path of the turn that brought the reward. This times that copy two
ways on the same trained router, in the same run:

* ``bytes``: ``load_router(snapshot())``, the round trip through the snapshot's compressed,
  checksummed bytes (what serving did before ``Router.replica``);
* ``replica``: ``Router.replica()``, the same state copied in memory.

The router learns ``--decisions`` decisions on the latency benchmark's 50-candidate pools first (the
number of weights it has touched sets the cost of the bytes). Run it as::

    taskset -c 0,1 python benchmarks/serving_copy.py --decisions 2000 --repeats 30

and it prints the median milliseconds of each, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from router_latency import WORDS, make_pool

from memabra import Budget, RoutingContext
from memabra.router import LinearRouter, Router, Similarity, VWRouter, load_router


def trained(factory: Callable[[], Router], decisions: int, seed: int) -> Router:
    rng = np.random.default_rng(seed)
    router = factory()
    budget = Budget(max_tokens=2000)
    pools = [make_pool(rng, 50) for _ in range(20)]
    for i in range(decisions):
        context = RoutingContext(query=" ".join(rng.choice(WORDS, size=6)), user_id=f"user-{i % 7}", budget=budget)
        selection = router.choose(context, pools[i % len(pools)])
        router.learn(selection, float(rng.random()), {cid: float(rng.random() < 0.3) for cid in selection.chosen_ids})
    return router


def median_ms(call: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    similarity = Similarity()  # lexical: the copy does not depend on the embedding model
    learners: dict[str, Callable[[], Router]] = {
        "linear": lambda: LinearRouter(similarity=similarity),
        "vw": lambda: VWRouter(similarity=similarity),
    }
    print(f"{args.decisions} learned decisions, medians of {args.repeats} copies")
    print(f"{'learner':8s} {'bytes ms':>9s} {'replica ms':>11s} {'ratio':>7s}")
    for name, factory in learners.items():
        router = trained(factory, args.decisions, seed=0)
        via_bytes = median_ms(lambda router=router: load_router(router.snapshot(), similarity=similarity), args.repeats)
        copied = median_ms(lambda router=router: router.replica(similarity=similarity), args.repeats)
        print(f"{name:8s} {via_bytes:9.2f} {copied:11.2f} {via_bytes / copied:7.1f}", flush=True)


if __name__ == "__main__":
    main()
