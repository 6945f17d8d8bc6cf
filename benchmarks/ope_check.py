"""Check ``memabra ope log`` against on-policy truth on the bench files.

For each file, the logger (first router, given as ``NAME`` or ``NAME:{json args}``) is replayed with
``--log-db``-style logging while every target router runs on-policy on the same rounds; then each
target is evaluated offline on the logger's log. The table shows the recommended estimate, its
interval, the target's on-policy ``reward_mean`` (the truth), whether the interval covers it, and
the support verdict.

    python benchmarks/ope_check.py --logger 'vw:{"exploration": "epsilon", "epsilon": 0.3}' \\
        --targets hybrid,bm25,random --passes 2 /work/shared/data/bench/*.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memabra.evals.bench import (
    DecisionLogWriter,
    load_rounds,
    router_factories,
    run_bench,
)
from memabra.evals.offline import ROUTERS, Target, evaluate_policies
from memabra.router import Router, Similarity
from memabra.storage import EpisodeLog

BENCH_NAMES = {
    "sklearn": "linear"
}  # the bench's name for a router where it differs from ope's


def logger_factory(spec: str, similarity: Similarity) -> tuple[str, Any]:
    name, _, args = spec.partition(":")
    cls = ROUTERS[BENCH_NAMES.get(name, name)]
    kwargs = json.loads(args) if args else {}

    def build(seed: int) -> Router:
        return cls(seed=seed, similarity=similarity, **kwargs)

    return f"logger:{name}", build


def check_file(
    path: Path,
    logger: str,
    targets: list[str],
    passes: int,
    seed: int,
    similarity: Similarity,
) -> list[dict[str, Any]]:
    rounds = load_rounds(path)
    label, build = logger_factory(logger, similarity)
    factories = {label: build, **router_factories(targets, similarity)}
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'log.db'}"
        with DecisionLogWriter(url) as writer:
            report = run_bench(
                rounds, factories, passes, seed, source=path.name, sink=writer
            )
        started = time.perf_counter()
        with EpisodeLog(url) as log:
            evaluations = evaluate_policies(
                log, [Target(t, factories[t](seed)) for t in targets], seed=seed
            )
        seconds = time.perf_counter() - started
    rows = []
    for ev in evaluations:
        truth = report["routers"][ev.policy]["reward_mean"]
        rec = ev.recommended
        rows.append(
            {
                "file": path.name,
                "target": ev.policy,
                "logger_reward_mean": report["routers"][label]["reward_mean"],
                "n_decisions": ev.n_rounds,
                "truth": truth,
                "recommended": rec.as_dict(),
                "covered": rec.ci_low <= truth <= rec.ci_high,
                "estimates": {
                    k: [e.value, e.ci_low, e.ci_high] for k, e in ev.estimates.items()
                },
                "floor_share": ev.floor_share,
                "diagnostics": ev.diagnostics,
                "reward_model": None
                if ev.reward_model is None
                else ev.reward_model.as_dict(),
                "ope_seconds": seconds,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--logger",
        default="vw",
        help="NAME or NAME:{json constructor args}; the logging router",
    )
    parser.add_argument("--targets", default="hybrid,bm25,random")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--lexical", action="store_true", help="BM25-only similarity (no embeddings)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    similarity = Similarity(encoder=None) if args.lexical else Similarity.default()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rows: list[dict[str, Any]] = []
    print(f"logger {args.logger}, {args.passes} passes, seed {args.seed}\n")
    print(
        "| file | target | recommended | 95% interval | truth (on-policy) | covered | verdict |"
    )
    print("|---|---|---:|---|---:|---|---|")
    for path in args.files:
        for row in check_file(
            path, args.logger, targets, args.passes, args.seed, similarity
        ):
            rows.append(row)
            rec = row["recommended"]
            verdict = (
                "supported" if rec["supported"] else f"unsupported: {rec['reason']}"
            )
            print(
                f"| {row['file']} | {row['target']} | {rec['value']:+.3f} | {rec['ci_low']:+.3f} … {rec['ci_high']:+.3f} "
                f"| {row['truth']:+.3f} | {'yes' if row['covered'] else 'NO'} | {verdict} |",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
