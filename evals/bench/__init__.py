"""The routing benchmark: replay bench files (JSON Lines rounds) against routers."""

from __future__ import annotations

from memabra.evals.bench._data import NEED_RULES, BenchFormatError, BenchRound, load_rounds, parse_round, split_unseen
from memabra.evals.bench._harness import DecisionHook, RoundResult, RouterFactory, run_bench, run_router, summarize
from memabra.evals.bench._log_db import DecisionLogWriter
from memabra.evals.bench._provenance import bench_environment, bench_router_params, similarity_label
from memabra.evals.bench._reward import bench_budget_tokens, bench_reward
from memabra.evals.bench._routers import ROUTER_NAMES, router_factories
from memabra.evals.bench._run_record import BenchRun, bench_run_of, refuse_unfinished_bench_log
from memabra.evals.bench._seeds import parse_seeds, seed_metrics, summarize_seeds

__all__ = [
    "ROUTER_NAMES",
    "NEED_RULES",
    "BenchFormatError",
    "DecisionHook",
    "BenchRound",
    "BenchRun",
    "DecisionLogWriter",
    "RoundResult",
    "RouterFactory",
    "bench_budget_tokens",
    "bench_environment",
    "bench_reward",
    "bench_router_params",
    "bench_run_of",
    "load_rounds",
    "parse_seeds",
    "parse_round",
    "refuse_unfinished_bench_log",
    "router_factories",
    "run_bench",
    "run_router",
    "seed_metrics",
    "similarity_label",
    "split_unseen",
    "summarize",
    "summarize_seeds",
]
