"""Deleting episodes (``EpisodeLog.delete_episodes``, ``memabra episodes delete``): wall time of a
retention pass over a whole log, with the feedback table's ``decision_id`` index (migration 0008)
and, as the baseline in the same run, without it.

    python benchmarks/delete_episodes.py [--episodes 2000] [--feedback 10] [--repeats 3] [--pg URL]

Each repeat builds a fresh log (``--episodes`` episodes of 20 candidates, each with ``--feedback``
feedback events), drops the index for the baseline, and times one ``delete_episodes`` of every
episode. Without the index, each deleted decision's cascade to ``feedback`` scans the whole
feedback table, so the baseline grows with episodes x feedback rows. Prints medians and the ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _scratch import scratch_log
from log_throughput import make_episode  # the same synthetic episodes as the write benchmark
from sqlalchemy import text

from memabra import Feedback
from memabra.storage import EpisodeLog, upgrade

FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)


def build(url: str, episodes: int, feedback: int) -> None:
    upgrade(url)
    with EpisodeLog(url) as log:
        batch = []
        for i in range(episodes):
            ep = make_episode(i)
            events = tuple(Feedback(ep.id, "explicit", "bench", {"rating": 1 + j % 5}) for j in range(feedback))
            batch.append(dataclasses.replace(ep, feedback=events))
            if len(batch) == 500:
                log.log_episodes(batch)
                batch = []
        log.log_episodes(batch)


def timed_delete(url: str, *, indexed: bool) -> float:
    with EpisodeLog(url, check=False) as log:
        if not indexed:
            with log.engine.begin() as conn:
                conn.execute(text("DROP INDEX ix_feedback_decision_id"))
        start = time.perf_counter()
        deleted = log.delete_episodes(before=FAR_FUTURE, include_unlearned=True).deleted
        elapsed = time.perf_counter() - start
        assert deleted > 0 and log.count_episodes() == 0
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--feedback", type=int, default=10, help="feedback events per episode")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pg", help="also on PostgreSQL (a fresh schema per run)")
    args = parser.parse_args()
    backends = ["sqlite"] + (["postgres"] if args.pg else [])
    print(f"{args.episodes} episodes x 20 candidates, {args.feedback} feedback events each; {args.repeats} repeats")
    print(f"{'backend':<10} {'index':<8} {'median s':>9} {'runs':<24} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.repeats):
                for indexed in (False, True):  # interleaved, so drift hits both alike
                    pg = args.pg if backend == "postgres" else None
                    with scratch_log(pg, "bench_delete", folder=Path(tmp)) as url:
                        build(url, args.episodes, args.feedback)
                        times[indexed].append(timed_delete(url, indexed=indexed))
            base = statistics.median(times[False])
            for indexed in (False, True):
                runs = ", ".join(f"{t:.2f}" for t in times[indexed])
                med = statistics.median(times[indexed])
                print(f"{backend:<10} {'yes' if indexed else 'no':<8} {med:>9.2f} {runs:<24} {base / med:>5.1f}x")


if __name__ == "__main__":
    main()
