"""A bench or simulator log reads back in the order its decisions were made, whatever the clock did:
offline evaluation's folds and seeded draws follow that order, so a tie broken by the decisions'
random ids would change the estimates from one run of the same command to the next."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from bench.bench_rounds import bench_round

from memabra.evals.bench import DecisionLogWriter, load_rounds, router_factories, run_bench
from memabra.evals.simulator import World, log_simulation
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog, upgrade

FROZEN = datetime(2026, 1, 1, tzinfo=UTC)


def _decision_order(url: str) -> list[str]:
    with EpisodeLog(url) as log:
        return [selection.id for selection, _ in log.iter_selections()]


def test_bench_decisions_made_at_one_clock_reading_read_back_in_the_order_made(tmp_path: Path) -> None:
    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(json.dumps(bench_round(i)) + "\n" for i in range(24)), encoding="utf-8")
    rounds = load_rounds(path)
    url = f"sqlite:///{tmp_path / 'log.db'}"
    made: list[str] = []
    with DecisionLogWriter(url) as writer:

        def hook(selection, reward, round_):  # type: ignore[no-untyped-def]
            # a coarse clock: every decision of the run at one reading
            frozen = replace(selection, created_at=FROZEN)
            made.append(frozen.id)
            writer(frozen, reward, round_)

        run_bench(rounds, router_factories(["hybrid"], Similarity(encoder=None)), 1, 0, on_decision=hook)
    assert _decision_order(url) == made


def test_bench_decisions_after_the_clock_stepped_back_read_back_in_the_order_made(tmp_path: Path) -> None:
    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(json.dumps(bench_round(i)) + "\n" for i in range(12)), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'log.db'}"
    made: list[str] = []
    with DecisionLogWriter(url) as writer:

        def hook(selection, reward, round_):  # type: ignore[no-untyped-def]
            # NTP steps the clock back an hour halfway through the run
            stepped = replace(selection, created_at=FROZEN.replace(hour=12 if len(made) < 6 else 11, second=len(made)))
            made.append(stepped.id)
            writer(stepped, reward, round_)

        run_bench(load_rounds(path), router_factories(["hybrid"], Similarity(encoder=None)), 1, 0, on_decision=hook)
    assert _decision_order(url) == made


def test_simulator_log_made_at_one_clock_reading_reads_back_in_the_order_made(tmp_path: Path) -> None:
    made: list[str] = []

    class Recording(HybridRouter):
        def choose(self, context, candidates):  # type: ignore[no-untyped-def]
            selection = replace(super().choose(context, candidates), created_at=FROZEN)  # a coarse clock
            made.append(selection.id)
            return selection

    url = f"sqlite:///{tmp_path / 'sim.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        log_simulation(lambda s: Recording(seed=s, similarity=Similarity(encoder=None)), World(seed=0), 30, log)
    assert _decision_order(url) == made
