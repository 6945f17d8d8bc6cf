"""Episode-log write throughput: 10,000 decisions x 20 candidates, SQLite and PostgreSQL.

    python benchmarks/log_throughput.py [--decisions 10000] [--batch 1000] [--pg URL]

Prints decisions per second for bulk logging (``EpisodeLog.log_episodes`` in batches: one
``COPY`` per table on PostgreSQL, one ``executemany`` on SQLite) and, as a baseline measured in
the same run, one transaction per episode on a sample; the ratio is what bulk logging buys.
Medians over batches, wall clock. ``client cpu`` is the same bulk rate counted in this process's
CPU time only: on a shared machine it shows what the code costs apart from waiting for a core.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

from _scratch import scratch_schema

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
    Step,
    StepKind,
)
from memabra.storage import EpisodeLog, upgrade


def make_episode(i: int, n_candidates: int = 20) -> Episode:
    cands = [
        Candidate(f"m{j}", CandidateKind.MEMORY, f"memory number {j} of user {i % 50}", 12 + j)
        for j in range(n_candidates)
    ]
    ctx = RoutingContext(query=f"question {i}", user_id=f"user{i % 50}", budget=Budget(max_tokens=400))
    scored = tuple(
        ScoredCandidate(c, {"lex": 0.1 * j, "sem": 0.05 * j, "rank_lex": float(j)}, 1.0 - 0.01 * j, j)
        for j, c in enumerate(cands)
    )
    remaining = [c.id for c in cands] + [STOP_ID]
    draws = []
    for slot, cid in enumerate(["m0", "m3", STOP_ID]):
        p = 1.0 / len(remaining)
        draws.append(SlotDraw(slot, CandidateKind.MEMORY, tuple(remaining), tuple([p] * len(remaining)), cid, p))
        remaining.remove(cid)
    sel = Selection(ctx, scored, tuple(draws), policy="bench", policy_version="b-1", seed=i)
    steps = (Step(StepKind.MODEL, "model", input_tokens=300, output_tokens=40, latency_ms=20.0),)
    return Episode(user_id=ctx.user_id, query=ctx.query, selections=(sel,), steps=steps, answer="ok")


def run(url: str, decisions: int, batch: int, sample: int) -> dict[str, float]:
    upgrade(url)
    episodes = [make_episode(i) for i in range(decisions)]
    with EpisodeLog(url) as log:
        rates, cpu_rates = [], []
        for start in range(0, decisions, batch):
            chunk = episodes[start : start + batch]
            t0, c0 = time.perf_counter(), time.process_time()
            log.log_episodes(chunk)
            rates.append(len(chunk) / (time.perf_counter() - t0))
            cpu_rates.append(len(chunk) / max(time.process_time() - c0, 1e-9))
        singles = [make_episode(decisions + i) for i in range(sample)]
        single_times = []
        for ep in singles:
            t0 = time.perf_counter()
            log.log_episode(ep)
            single_times.append(time.perf_counter() - t0)
    single_rate = 1.0 / statistics.median(single_times)
    bulk_rate = statistics.median(rates)
    return {
        "bulk": bulk_rate,
        "single": single_rate,
        "ratio": bulk_rate / single_rate,
        "cpu": statistics.median(cpu_rates),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--sample", type=int, default=200, help="episodes logged one per transaction for the baseline")
    parser.add_argument("--pg", default=os.environ.get("MEMABRA_TEST_DATABASE_URL"), help="PostgreSQL URL (optional)")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cpu(s), Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{args.decisions} decisions x 20 candidates, batches of {args.batch}; baseline: {args.sample} one-per-transaction"
    )
    with tempfile.TemporaryDirectory() as tmp:
        r = run(f"sqlite:///{tmp}/bench.db", args.decisions, args.batch, args.sample)
        print(
            f"sqlite     bulk {r['bulk']:8.0f} decisions/s   single {r['single']:7.0f}/s   ratio {r['ratio']:.1f}x   client cpu {r['cpu']:7.0f}/s"
        )
    if args.pg:
        with scratch_schema(args.pg) as url:
            r = run(url, args.decisions, args.batch, args.sample)
            print(
                f"postgresql bulk {r['bulk']:8.0f} decisions/s   single {r['single']:7.0f}/s   ratio {r['ratio']:.1f}x   client cpu {r['cpu']:7.0f}/s"
            )


if __name__ == "__main__":
    main()
