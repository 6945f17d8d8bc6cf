"""Replaying a bench file against routers: each round every router chooses, is rewarded with the
composite reward of :mod:`memabra.evals.bench._reward` and learns; ``passes`` passes over the rounds
in a seeded shuffled order (the same order for every router).

Candidate usage statistics (``times_chosen``, ``times_helped``) are kept per router and per round
``group`` (one candidate pool: a user's memories, whose counts the episode log keeps per user, or
a tool registry), and handed to it as ``Candidate.usage``.

Decision times are ``Selection.latency_ms`` (featurisation included) measured after the similarity
caches were warmed with every round's texts, so the first router timed does not pay for them.

``hit_rate_unseen``: a fresh router learns for ``passes`` passes on a seeded half of the rounds (rounds
sharing a query stay together) and is then scored, without learning, on the other half
(``tokens_mean_unseen`` is what it injects there; the report's ``rounds_unseen`` is that half's size).

A hit follows the round's ``need`` rule (:meth:`BenchRound.is_hit`); ``recall`` is the share of the
relevant candidates chosen. The feedback is what an agent sees: each chosen candidate's own outcome
(1 when relevant), and for ``need: all`` rounds the relevant candidates it left out, as ``missing``
(an agent without a tool it needs fails at that call).

``on_decision`` (optional) is called with every learning decision of a router (selection, reward,
round): the hook through which an episode log can record the first router's decisions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

import numpy as np

from memabra._records import Budget, Candidate, CandidateStats, RewardBreakdown, RoutingContext, Selection
from memabra.evals.bench._data import BenchRound, split_unseen
from memabra.evals.bench._reward import bench_budget_tokens, bench_reward
from memabra.router import Router

__all__ = ["DecisionHook", "RoundResult", "RouterFactory", "run_bench", "run_router", "summarize"]

RouterFactory = Callable[[int], Router]
"""Builds a fresh router from a seed."""

ProgressCallback = Callable[[str, int, int], None]
"""Called as ``(router name, rounds done, rounds total)``."""

DecisionHook = Callable[[Selection, RewardBreakdown, BenchRound], None]
"""Called after a router's decision with its selection, the harness's reward and the round."""


@dataclass(frozen=True, slots=True)
class RoundResult:
    pass_index: int
    round_id: str
    hit: bool
    reward: float
    tokens: int
    n_chosen: int
    decision_ms: float
    recall: float = 0.0


@dataclass
class _Usage:
    """Per (group, candidate id) counts. A group is one candidate pool (a user's memories, whose
    counts the episode log keeps per user, or one tool registry), so two users' ``mem-1`` never
    share counts."""

    chosen: dict[tuple[str, str], int] = field(default_factory=dict)
    helped: dict[tuple[str, str], int] = field(default_factory=dict)
    # the annotated copy of each candidate (by identity: load_rounds shares one object per distinct
    # candidate) with the counts it carries, rebuilt only when they change
    _copies: dict[tuple[int, str], Candidate] = field(default_factory=dict)

    def annotate(self, round_: BenchRound) -> list[Candidate]:
        g = round_.group
        out = []
        for c in round_.candidates:
            stats = CandidateStats(self.chosen.get((g, c.id), 0), self.helped.get((g, c.id), 0))
            copy = self._copies.get((id(c), g))
            if copy is None or copy.usage != stats:
                copy = replace(c, metadata={**c.metadata, "source": "bench"}, usage=stats)
                self._copies[(id(c), g)] = copy
            out.append(copy)
        return out

    def record(self, round_: BenchRound, chosen: Sequence[str]) -> None:
        for cid in chosen:
            key = (round_.group, cid)
            self.chosen[key] = self.chosen.get(key, 0) + 1
            if cid in round_.relevant:
                self.helped[key] = self.helped.get(key, 0) + 1


def _play(
    router: Router,
    round_: BenchRound,
    usage: _Usage,
    learn: bool,
    pass_index: int,
    on_decision: DecisionHook | None = None,
) -> RoundResult:
    kind = round_.kind
    budget = Budget(max_tokens=bench_budget_tokens(round_), slots={kind: round_.slots})
    context = RoutingContext(query=round_.query, user_id=round_.group or "bench", kinds=(kind,), budget=budget)
    selection = router.choose(context, usage.annotate(round_))
    chosen = selection.chosen_ids
    reward = bench_reward(round_, chosen)
    if on_decision is not None:
        on_decision(selection, reward, round_)
    if learn:
        outcomes = {cid: 1.0 if cid in round_.relevant else 0.0 for cid in chosen}
        missing: tuple[str, ...] = ()
        if round_.need == "all":
            offered = {sc.candidate.id for sc in selection.offered}
            missing = tuple(sorted(cid for cid in round_.relevant if cid not in chosen and cid in offered))
        router.learn(selection, reward, outcomes, missing=missing)
        usage.record(round_, chosen)
    return RoundResult(
        pass_index=pass_index,
        round_id=round_.id,
        hit=round_.is_hit(chosen),
        reward=reward.total,
        tokens=selection.tokens_injected,
        n_chosen=len(chosen),
        decision_ms=selection.latency_ms,
        recall=round_.recall(chosen),
    )


def run_router(
    factory: RouterFactory,
    rounds: Sequence[BenchRound],
    passes: int,
    seed: int,
    *,
    name: str = "router",
    progress: ProgressCallback | None = None,
    on_decision: DecisionHook | None = None,
) -> tuple[list[RoundResult], list[RoundResult]]:
    """Replay ``rounds`` for ``passes`` passes against a fresh router; returns every round's result
    and the results on the unseen half (scored without learning, ``pass_index == passes``)."""
    if passes < 1:
        raise ValueError(f"passes must be at least 1, got {passes}")
    rng = np.random.default_rng([seed, 0])
    orders = [rng.permutation(len(rounds)) for _ in range(passes)]
    learn_half, score_half = split_unseen(rounds, seed)
    total = passes * len(rounds) + passes * len(learn_half) + len(score_half)
    done = 0

    router = factory(seed)
    usage = _Usage()
    results: list[RoundResult] = []
    for p, order in enumerate(orders):
        for i in order:
            results.append(_play(router, rounds[int(i)], usage, learn=True, pass_index=p, on_decision=on_decision))
            done += 1
            if progress is not None:
                progress(name, done, total)

    unseen_router = factory(seed)
    unseen_usage = _Usage()
    half_rng = np.random.default_rng([seed, 2])
    for p in range(passes):
        for i in half_rng.permutation(learn_half):
            _play(unseen_router, rounds[int(i)], unseen_usage, learn=True, pass_index=p)
            done += 1
            if progress is not None:
                progress(name, done, total)
    unseen: list[RoundResult] = []
    for i in score_half:
        unseen.append(_play(unseen_router, rounds[int(i)], unseen_usage, learn=False, pass_index=passes))
        done += 1
        if progress is not None:
            progress(name, done, total)
    return results, unseen


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def summarize(
    results: Sequence[RoundResult], passes: int, unseen: Sequence[RoundResult], curve_points: int = 5
) -> dict[str, Any]:
    """The per-router JSON block of the bench report (``unseen``: the unseen half's results)."""
    hits = np.array([r.hit for r in results], dtype=float)
    rewards = np.array([r.reward for r in results])
    tokens = np.array([r.tokens for r in results], dtype=float)
    latency = np.array([r.decision_ms for r in results])
    first = np.array([r.hit for r in results if r.pass_index == 0], dtype=float)
    last = np.array([r.hit for r in results if r.pass_index == passes - 1], dtype=float)
    first_tokens = np.array([r.tokens for r in results if r.pass_index == 0], dtype=float)
    last_tokens = np.array([r.tokens for r in results if r.pass_index == passes - 1], dtype=float)
    curve: list[dict[str, float | int]] = []
    for p in range(passes):
        block = [r for r in results if r.pass_index == p]
        edges = np.linspace(0, len(block), min(curve_points, len(block)) + 1).astype(int)
        for start, stop in pairwise(edges):
            window = block[start:stop]
            curve.append(
                {
                    "pass": p + 1,
                    "round": p * len(block) + int(stop),
                    "hit_rate": float(np.mean([r.hit for r in window])),
                    "reward_mean": float(np.mean([r.reward for r in window])),
                    "tokens_mean": float(np.mean([r.tokens for r in window])),
                }
            )
    return {
        "hit_rate": float(hits.mean()),
        "hit_rate_first_pass": float(first.mean()),
        "hit_rate_last_pass": float(last.mean()),
        "hit_rate_unseen": _mean([r.hit for r in unseen]),
        "tokens_mean_unseen": _mean([r.tokens for r in unseen]),
        "recall": _mean([r.recall for r in results]),
        "reward_mean": float(rewards.mean()),
        "tokens_mean": float(tokens.mean()),
        "tokens_mean_first_pass": float(first_tokens.mean()),
        "tokens_mean_last_pass": float(last_tokens.mean()),
        "decision_ms_p50": float(np.percentile(latency, 50)),
        "decision_ms_p99": float(np.percentile(latency, 99)),
        "learning_curve": curve,
    }


def _warm_caches(router: Router, rounds: Sequence[BenchRound]) -> None:
    """Featurise every round once so the shared similarity caches hold each pool's and query's
    embedding before any router is timed: every router then meets the same warm caches, as in a
    serving process (``benchmarks/router_latency.py`` times the query embedding itself)."""
    for round_ in rounds:
        context = RoutingContext(query=round_.query, user_id=round_.group or "bench", kinds=(round_.kind,))
        router.featurize(context, round_.candidates)


def run_bench(
    rounds: Sequence[BenchRound],
    routers: Mapping[str, RouterFactory],
    passes: int,
    seed: int,
    *,
    progress: ProgressCallback | None = None,
    source: str | None = None,
    on_decision: DecisionHook | None = None,
) -> dict[str, Any]:
    """Replay ``rounds`` against every router; the report's JSON document. ``on_decision`` sees the
    decisions of the first router only (the one whose log the others' results can check)."""
    report: dict[str, Any] = {
        "file": source,
        "rounds": len(rounds),
        "passes": passes,
        "seed": seed,
        "rounds_unseen": len(split_unseen(rounds, seed)[1]),
        "routers": {},
    }
    if routers:
        _warm_caches(next(iter(routers.values()))(seed), rounds)
    for position, (name, factory) in enumerate(routers.items()):
        hook = on_decision if position == 0 else None
        results, unseen = run_router(factory, rounds, passes, seed, name=name, progress=progress, on_decision=hook)
        report["routers"][name] = summarize(results, passes, unseen)
    return report
