"""Check ``memabra ope log`` against on-policy truth on the bench files.

For each file, the logger (first router, given as ``NAME`` or ``NAME:{json args}``) is replayed with
``--log-db``-style logging while every target router runs on-policy on the same rounds; then each
target is evaluated offline on the logger's log. The table shows the recommended estimate, its
interval, the target's on-policy ``reward_mean`` (the truth), whether the interval covers it, and
the support verdict; a short file is replayed for more passes until its log holds
``--min-decisions`` decisions.

    python benchmarks/ope_check.py --logger linear --targets hybrid,bm25,random \\
        --passes 2 --min-decisions 1500 ../shared/data/bench/*.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
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
from memabra.evals.offline import ROUTERS, LogEvaluation, Target, evaluate_policies
from memabra.evals.ope import PolicyValueInterval
from memabra.router import Router, Similarity
from memabra.storage import EpisodeLog

# a reference baseline's whole selection is followed on about PRIOR_FLOOR (5%) of the decisions:
# 1,500 give it about 75, enough for 20 effective decisions on a five-slot selection and for the
# decisions where it departs from the learner (4% of registry30's) to be followed a few times,
# so that a tail the log never reached shows in the mean weight instead of passing unseen
MIN_DECISIONS = 1500
BENCH_NAMES = {"sklearn": "linear"}  # the bench's name for a router where it differs from ope's


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
    min_decisions: int = 0,
) -> list[dict[str, Any]]:
    rounds = load_rounds(path)
    passes = max(passes, math.ceil(min_decisions / len(rounds)))
    label, build = logger_factory(logger, similarity)
    factories = {label: build, **router_factories(targets, similarity)}
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'log.db'}"
        with DecisionLogWriter(url) as writer:
            report = run_bench(rounds, factories, passes, seed, source=path.name, on_decision=writer)
        started = time.perf_counter()
        with EpisodeLog(url) as log:
            evaluations = evaluate_policies(log, [Target(t, factories[t](seed)) for t in targets], seed=seed)
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
                "passes": passes,
                "truth": truth,
                "recommended": rec.as_dict(),
                "covered": rec.ci_low <= truth <= rec.ci_high,
                "estimates": {k: [e.value, e.ci_low, e.ci_high] for k, e in ev.estimates.items()},
                "verdicts": _verdicts(ev),
                **_bias_gaps(ev),
                "floor_share": ev.floor_share,
                "diagnostics": {k: d.as_dict() for k, d in ev.diagnostics.items()},
                "reward_model": None if ev.reward_model is None else ev.reward_model.as_dict(),
                "ope_seconds": seconds,
                # paired on the same decisions, against the other supported targets' truths
                "versus": {
                    other: {
                        "difference": d.value,
                        "ci_low": d.ci_low,
                        "ci_high": d.ci_high,
                        "truth": truth - report["routers"][other]["reward_mean"],
                    }
                    for other, d in ev.versus.items()
                    if other in report["routers"]
                },
            }
        )
    return rows


def _verdicts(ev: LogEvaluation) -> dict[str, dict[str, Any]]:
    """Every estimator's own support verdict, so a run shows where a fallback would have stood."""
    return {k: {"supported": v.supported, "reason": v.reason} for k, v in ev.verdicts.items()}


def _bias_gaps(ev: LogEvaluation) -> dict[str, list[float] | None]:
    """Cascade DR minus each estimator that leans on per-draw ratios (``cdr_minus_pi``,
    ``cdr_minus_pi_dr``, ``cdr_minus_iips``, ``cdr_minus_idr``) and the slot sum minus DM
    (``slot_sum_minus_dm``), each [difference, ci_low, ci_high] on the same decisions: the biases
    the verdicts refuse them for (docs/ope.md)."""

    def triple(gap: PolicyValueInterval | None) -> list[float] | None:
        return None if gap is None else [gap.value, gap.ci_low, gap.ci_high]

    return {
        **{f"cdr_minus_{name.replace('-', '_')}": triple(gap) for name, gap in ev.gaps.items()},
        "slot_sum_minus_dm": triple(ev.slot_gap),
    }


def print_paired(rows: list[dict[str, Any]]) -> None:
    """Each supported pair once: the paired difference, the true difference, and whether the
    log ranks the two as the truth does (or says it cannot)."""
    print("\n| file | difference | paired estimate | 95% interval | truth | covered | ranking |")
    print("|---|---|---:|---|---:|---|---|")
    for row in rows:
        for other, d in row["versus"].items():
            if (row["target"], other) > (other, row["target"]):
                continue
            if d["ci_low"] > 0 or d["ci_high"] < 0:
                ranked = "as the truth" if (d["ci_low"] > 0) == (d["truth"] > 0) else "WRONG"
            else:
                ranked = "not distinguishable"
            covered = d["ci_low"] <= d["truth"] <= d["ci_high"]
            print(
                f"| {row['file']} | {row['target']} - {other} | {d['difference']:+.3f} "
                f"| {d['ci_low']:+.3f} … {d['ci_high']:+.3f} | {d['truth']:+.3f} | {'yes' if covered else 'NO'} | {ranked} |"
            )


def simulator_coverage(seeds: int, n_rounds: int, epsilon: float) -> dict[str, Any]:
    """Coverage of every estimator's interval over seeded simulator logs, where the truth is exact.

    The logger is the VW router, epsilon-greedy (``epsilon``), learning online; the targets are its
    own final state made greedy, uniform random and hybrid top-k."""
    from dataclasses import replace

    from memabra.evals.simulator import World, log_simulation, policy_truth
    from memabra.router import HybridRouter, RandomRouter, VWRouter
    from memabra.storage import upgrade

    similarity = Similarity(encoder=None)
    hits: dict[str, dict[str, list[bool]]] = {}
    supported: dict[str, list[bool]] = {}
    per_seed: list[dict[str, Any]] = []
    for seed in range(seeds):
        world = World(seed=seed)
        with tempfile.TemporaryDirectory() as scratch:
            url = f"sqlite:///{Path(scratch) / 'sim.db'}"
            upgrade(url)
            with EpisodeLog(url) as log:
                rounds, logger = log_simulation(
                    lambda s: VWRouter(
                        seed=s,
                        similarity=similarity,
                        exploration="epsilon",
                        epsilon=epsilon,
                    ),
                    world,
                    n_rounds,
                    log,
                    seed=seed,
                )
                snap = logger.snapshot()
                greedy = VWRouter.restore(
                    replace(
                        snap,
                        learner_args={**snap.learner_args, "exploration": "greedy"},
                    ),
                    similarity=similarity,
                )
                targets: dict[str, Router] = {
                    "vw greedy": greedy,
                    "random": RandomRouter(similarity=similarity, seed=seed),
                    "hybrid": HybridRouter(similarity=similarity),
                }
                evaluations = evaluate_policies(log, [Target(k, v) for k, v in targets.items()], seed=seed)
        for ev in evaluations:
            truth = policy_truth(
                targets[ev.policy],
                world,
                rounds,
                draws=10 if ev.policy == "random" else 1,
            )
            for name, e in ev.estimates.items():
                hits.setdefault(ev.policy, {}).setdefault(name, []).append(e.ci_low <= truth <= e.ci_high)
            rec = ev.recommended
            per_seed.append(
                {
                    "seed": seed,
                    "target": ev.policy,
                    "truth": truth,
                    "recommended": rec.as_dict(),
                    "estimates": {k: [e.value, e.ci_low, e.ci_high] for k, e in ev.estimates.items()},
                    "verdicts": _verdicts(ev),
                    **_bias_gaps(ev),
                    "diagnostics": {k: d.as_dict() for k, d in ev.diagnostics.items()},
                    "floor_share": ev.floor_share,
                }
            )
            hits[ev.policy].setdefault("recommended", []).append(rec.ci_low <= truth <= rec.ci_high)
            supported.setdefault(ev.policy, []).append(rec.supported)
            if rec.supported:
                hits[ev.policy].setdefault("recommended, supported", []).append(rec.ci_low <= truth <= rec.ci_high)
        print(f"seed {seed} done", file=sys.stderr, flush=True)
    return {
        "seeds": seeds,
        "rounds": n_rounds,
        "epsilon": epsilon,
        "coverage": {p: {k: sum(v) / len(v) for k, v in d.items()} for p, d in hits.items()},
        "supported_share": {p: sum(v) / len(v) for p, v in supported.items()},
        "per_seed": per_seed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument(
        "--simulator",
        type=int,
        default=0,
        metavar="SEEDS",
        help="coverage over this many simulator seeds",
    )
    parser.add_argument("--rounds", type=int, default=1500, help="simulator rounds per seed")
    parser.add_argument(
        "--epsilon",
        type=float,
        default=0.9,
        help="the simulator logger's epsilon (each explored option gets epsilon / 9: 0.1, what 0.5 gave a five-option set before the floor became per option)",
    )
    parser.add_argument(
        "--logger",
        default="linear",
        help="NAME or NAME:{json constructor args}; the logging router",
    )
    parser.add_argument("--targets", default="hybrid,bm25,random")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument(
        "--min-decisions",
        type=int,
        default=MIN_DECISIONS,
        help="more passes over a short file until its log holds this many decisions",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lexical", action="store_true", help="BM25-only similarity (no embeddings)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.simulator:
        result = simulator_coverage(args.simulator, args.rounds, args.epsilon)
        print(f"simulator: {args.simulator} seeds x {args.rounds} rounds, VW logger epsilon {args.epsilon}\n")
        names = sorted({k for d in result["coverage"].values() for k in d})
        print("| estimator | " + " | ".join(result["coverage"]) + " |")
        print("|---|" + "---:|" * len(result["coverage"]))
        for name in names:
            cells = [f"{d[name]:.0%}" if name in d else "-" for d in result["coverage"].values()]
            print(f"| {name} | " + " | ".join(cells) + " |")
        print(
            "| supported (share of seeds) | "
            + " | ".join(f"{v:.0%}" for v in result["supported_share"].values())
            + " |"
        )
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=2, default=float) + "\n")
        return 0
    similarity = Similarity(encoder=None) if args.lexical else Similarity.default()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rows: list[dict[str, Any]] = []
    print(f"logger {args.logger}, at least {args.passes} passes and {args.min_decisions} decisions, seed {args.seed}\n")
    print("| file | decisions | target | recommended | 95% interval | truth (on-policy) | covered | verdict |")
    print("|---|---:|---|---|---:|---|---|---|")
    for path in args.files:
        for row in check_file(path, args.logger, targets, args.passes, args.seed, similarity, args.min_decisions):
            rows.append(row)
            rec = row["recommended"]
            verdict = "supported" if rec["supported"] else f"unsupported: {rec['reason']}"
            print(
                f"| {row['file']} | {row['n_decisions']} | {row['target']} | {rec['estimator']} {rec['value']:+.3f} "
                f"| {rec['ci_low']:+.3f} … {rec['ci_high']:+.3f} | {row['truth']:+.3f} "
                f"| {'yes' if row['covered'] else 'NO'} | {verdict} |",
                flush=True,
            )
    print_paired(rows)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
