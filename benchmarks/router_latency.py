"""Decision latency of the routers (not a test): 50 and 128 candidates, the default budget, the
learners' default exploration (top-M epsilon-greedy).

Two figures per router, over ``--decisions`` decisions after a warm-up (each decision also learns, as
in serving):

* ``precomputed``: ``choose`` with a FeatureTable computed beforehand (``features=``) -- the slot
  loop, the learner's predictions and the Selection record;
* ``end to end``: ``choose`` from raw candidates -- BM25 over the pool, the query's embedding (the
  pool's embeddings are cached, as a serving process would have them) and the same slot loop.

Run it on two cores as the README does::

    taskset -c 0,1 python benchmarks/router_latency.py --repeats 5

and it prints p50 / p99 in milliseconds (medians over the repeats), each p99's ratio to the
hybrid baseline's in the same mode and pool size, and the median of the decisions that filled every
slot (the ones that set a learner's p99; on a noisy machine a steadier figure than the p99 itself).

``--best-of N`` prints instead a figure that a shared machine's noise hardly moves, for comparing
code: after ``--decisions`` learned decisions, the next 600 decisions (no learning, each with its own
fixed seed) are timed N times over, round after round, and each decision keeps its fastest time;
it prints the median of those times over the decisions that filled every slot and over all.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from memabra import Budget, Candidate, CandidateKind, CandidateStats, RoutingContext
from memabra.router import HybridRouter, LinearRouter, Router, Similarity, VWRouter

WORDS = (
    "invoice billing refund shipping delivery espresso grinder weather forecast flight booking hotel "
    "workout running recipe dinner calendar meeting email contract lawyer doctor insurance budget "
    "password account printer laptop battery garden plant music playlist movie ticket train"
).split()


def make_pool(rng: np.random.Generator, n: int = 50) -> list[Candidate]:
    # 60% memories, 20% skills, 20% tools, as in the 50-candidate pool
    kinds = [CandidateKind.MEMORY] * 6 + [CandidateKind.SKILL] * 2 + [CandidateKind.TOOL] * 2
    pool = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(8, 30))))
        pool.append(
            Candidate(
                f"c{i}",
                kinds[i % len(kinds)],
                text,
                int(rng.integers(20, 200)),
                {"source": "bench"},
                usage=CandidateStats(int(rng.integers(0, 20)), 0),
            )
        )
    return pool


def measure(
    factory: Callable[[], Router],
    similarity: Similarity,
    decisions: int,
    precomputed: bool,
    seed: int,
    learn: bool = True,
    n_candidates: int = 50,
) -> tuple[float, float, float, float]:
    rng = np.random.default_rng(seed)
    router = factory()
    pool = make_pool(rng, n_candidates)
    budget = Budget(max_tokens=2000)
    queries = [" ".join(rng.choice(WORDS, size=6)) for _ in range(decisions + 50)]
    contexts = [RoutingContext(query=q, user_id=f"user-{i % 7}", budget=budget) for i, q in enumerate(queries)]
    # computed before the timed loop: the embedding model's worker threads would otherwise still be
    # busy with the last query while the next decision is timed
    tables = [router.featurize(c, pool) if precomputed else None for c in contexts]
    samples = []
    slots = []
    for i, (context, table) in enumerate(zip(contexts, tables, strict=True)):
        started = time.perf_counter()
        selection = router.choose(context, pool, features=table)
        elapsed = (time.perf_counter() - started) * 1000.0
        if learn:
            router.learn(
                selection, float(rng.random()), {cid: float(rng.random() < 0.3) for cid in selection.chosen_ids}
            )
        if i >= 50:  # warm-up: caches, workspace, embeddings of the pool
            samples.append(elapsed)
            slots.append(len(selection.slots))
    full_slots = sum(budget.slots_for(kind) for kind in contexts[0].kinds)
    full = [ms for ms, drawn in zip(samples, slots, strict=True) if drawn == full_slots] or [float("nan")]
    return (
        float(np.percentile(samples, 50)),
        float(np.percentile(samples, 99)),
        float(np.mean(slots)),
        float(np.median(full)),
    )


def best_of(factory: Callable[[], Router], decisions: int, rounds: int, n_candidates: int) -> tuple[float, float]:
    """``(median over full decisions, median over all)`` of each decision's fastest of ``rounds`` times, ms."""
    rng = np.random.default_rng(0)
    router = factory()
    pool = make_pool(rng, n_candidates)
    budget = Budget(max_tokens=2000)
    queries = [" ".join(rng.choice(WORDS, size=6)) for _ in range(decisions + 600)]
    contexts = [RoutingContext(query=q, user_id=f"user-{i % 7}", budget=budget) for i, q in enumerate(queries)]
    tables = [router.featurize(c, pool) for c in contexts]
    for context, table in zip(contexts[:decisions], tables, strict=False):
        selection = router.choose(context, pool, features=table)
        router.learn(selection, float(rng.random()), {cid: float(rng.random() < 0.3) for cid in selection.chosen_ids})
    timed = range(decisions, decisions + 600)
    fastest = dict.fromkeys(timed, float("inf"))
    drawn: dict[int, int] = {}
    # round after round rather than one decision N times in a row: each call then finds the caches
    # of another request, as in serving
    for _ in range(rounds):
        for i in timed:
            started = time.perf_counter()
            selection = router.choose(contexts[i], pool, features=tables[i], seed=i)
            fastest[i] = min(fastest[i], (time.perf_counter() - started) * 1000.0)
            drawn[i] = len(selection.slots)
    full_slots = sum(budget.slots_for(kind) for kind in contexts[0].kinds)
    full = [fastest[i] for i in timed if drawn[i] == full_slots] or [float("nan")]
    return float(np.median(full)), float(np.median(list(fastest.values())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lexical-only", action="store_true", help="skip the embedding model")
    parser.add_argument(
        "--no-learn", action="store_true", help="never learn: every decision fills every slot, as a fresh router does"
    )
    parser.add_argument("--candidates", default="50,128", help="comma-separated pool sizes")
    parser.add_argument("--modes", default="precomputed,end to end", help="precomputed and/or 'end to end'")
    parser.add_argument(
        "--best-of", type=int, default=0, help="time each of 600 decisions this many times (features precomputed)"
    )
    args = parser.parse_args()
    similarity = Similarity() if args.lexical_only else Similarity.default()
    # recall_limit=None: every candidate of the pool is scored, so 128 means 128
    routers: dict[str, Callable[[], Router]] = {
        "hybrid": lambda: HybridRouter(similarity=similarity, recall_limit=None),
        "vw": lambda: VWRouter(similarity=similarity, recall_limit=None),
        "linear": lambda: LinearRouter(similarity=similarity, recall_limit=None),
    }
    if args.best_of:
        print(f"best of {args.best_of} per decision, after {args.decisions} learned decisions; medians in ms")
        print(f"{'router':8s} {'pool':>5s} {'full':>8s} {'all':>8s}")
        for n in (int(c) for c in args.candidates.split(",")):
            for name, factory in routers.items():
                full, every = best_of(factory, args.decisions, args.best_of, n)
                print(f"{name:8s} {n:5d} {full:8.3f} {every:8.3f}", flush=True)
        return
    print(
        f"pools of {args.candidates} candidates (60% memories, 20% skills, 20% tools), slots 5/2/3, "
        f"{args.decisions} decisions x {args.repeats} repeats; semantic features: {'on' if similarity.has_semantic else 'off'}"
    )
    print(
        f"{'router':8s} {'pool':>5s} {'mode':12s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99/hybrid':>10s} {'slots drawn':>12s}"
        f" {'full p50 ms':>12s}"
    )
    hybrid_p99: dict[tuple[int, str], float] = {}
    for n in (int(c) for c in args.candidates.split(",")):
        for name, factory in routers.items():
            for mode in args.modes.split(","):
                precomputed = mode == "precomputed"
                runs = [
                    measure(
                        factory, similarity, args.decisions, precomputed, seed, learn=not args.no_learn, n_candidates=n
                    )
                    for seed in range(args.repeats)
                ]
                p50 = statistics.median(r[0] for r in runs)
                p99 = statistics.median(r[1] for r in runs)
                drawn = statistics.median(r[2] for r in runs)
                full = statistics.median(r[3] for r in runs)
                ratio = p99 / hybrid_p99.setdefault((n, mode), p99)
                print(
                    f"{name:8s} {n:5d} {mode:12s} {p50:8.2f} {p99:8.2f} {ratio:10.2f} {drawn:12.1f} {full:12.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
