"""What turning off psycopg's server-side prepared statements costs on direct PostgreSQL.

    python benchmarks/prepared_statements.py [--pg URL] [--turns 300] [--rounds 7]

memabra's engines never prepare (``PG_PREPARE_THRESHOLD = None``, so that a transaction-pooling
PgBouncer works). Each round times the same per-turn storage work twice, alternating which goes
first, on engines that differ only in ``prepare_threshold``: psycopg's default (5, prepared after
five runs) and memabra's (never). A turn's work: log one episode (its own transaction), read the
policy's active version and its learner checkpoint (what serving and the learner poll), and read
the final rewards after the learner's position. Prints the median turns per second of each and
their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _scratch import scratch_schema
from log_throughput import make_episode

from memabra.storage import EpisodeLog, LearnerStore, make_engine, upgrade


def turns_per_s(url: str, threshold: int | None, turns: int, offset: int) -> float:
    engine = make_engine(url, connect_args={"prepare_threshold": threshold})
    try:
        with EpisodeLog(engine=engine) as log:
            store = LearnerStore(engine)
            episodes = [make_episode(offset + i) for i in range(turns)]
            for ep in episodes[:10]:  # warm the pool (and, with preparing, the prepared statements)
                log.log_episode(ep)
            started = time.perf_counter()
            for ep in episodes[10:]:
                log.log_episode(ep)
                store.active_version("bench")
                store.checkpoint("bench")
                store.read_final(limit=50)
            return (turns - 10) / (time.perf_counter() - started)
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=os.environ.get("MEMABRA_TEST_DATABASE_URL"))
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not args.pg:
        parser.error("give --pg URL (or set MEMABRA_TEST_DATABASE_URL)")
    with scratch_schema(args.pg) as url:
        upgrade(url)
        rates: dict[str, list[float]] = {"prepared after 5 runs": [], "never prepared": []}
        for r in range(args.rounds):
            order = [("prepared after 5 runs", 5), ("never prepared", None)]
            for name, threshold in order if r % 2 == 0 else reversed(order):
                offset = (2 * r + (threshold is None)) * args.turns
                rates[name].append(turns_per_s(url, threshold, args.turns, offset))
        for name, values in rates.items():
            print(f"{name:>22}: {statistics.median(values):8.1f} turns/s (median of {args.rounds})")
        ratio = statistics.median(rates["never prepared"]) / statistics.median(rates["prepared after 5 runs"])
        print(f"{'never / prepared':>22}: {ratio:8.3f}")


if __name__ == "__main__":
    main()
