"""The bench harness: file format errors, the reward formula, the report's keys, determinism, the
unseen split, the CLI, and the real development files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import typer
from bench.bench_rounds import bench_round
from typer.testing import CliRunner

from memabra import RewardWeights
from memabra._cli._bench import bench
from memabra.evals.bench import (
    BenchFormatError,
    bench_budget_tokens,
    bench_reward,
    load_rounds,
    router_factories,
    run_bench,
    split_unseen,
)
from memabra.router import HybridRouter, Similarity, VWRouter

BENCH_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bench"
ROUTER_KEYS = {
    "hit_rate",
    "hit_rate_first_pass",
    "hit_rate_last_pass",
    "hit_rate_unseen",
    "tokens_mean_unseen",
    "recall",
    "reward_mean",
    "tokens_mean",
    "tokens_mean_first_pass",
    "tokens_mean_last_pass",
    "decision_ms_p50",
    "decision_ms_p99",
    "learning_curve",
}


def _write(tmp_path: Path, rows: list[dict[str, object]], name: str = "tiny.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return _write(tmp_path, [bench_round(i, relevant=f"t-{'abcd'[i % 4]}") for i in range(12)])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("query"), "missing field 'query'"),
        (lambda r: r.update(slots=-1), "slots"),
        (lambda r: r.update(relevant=["nope"]), "not candidates"),
        (lambda r: r.update(relevant=[]), "relevant"),
        (lambda r: r.update(candidates=[]), "empty"),
        (lambda r: r["candidates"].append(dict(r["candidates"][0])), "duplicate candidate ids"),
        (lambda r: r["candidates"][0].update(tokens=-3), "tokens"),
        (lambda r: r["candidates"][0].update(kind="spell"), "kind"),
        (lambda r: r.update(slots="2"), "slots"),
    ],
)
def test_bad_rounds_name_line_and_field(tmp_path: Path, mutate: object, message: str) -> None:
    row = bench_round(0)
    mutate(row)  # type: ignore[operator]
    path = _write(tmp_path, [bench_round(1), row])
    with pytest.raises(BenchFormatError, match=message) as info:
        load_rounds(path)
    assert "line 2" in str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(BenchFormatError, match="cannot read"):
        load_rounds(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(BenchFormatError, match="not valid JSON"):
        load_rounds(bad)
    twice = _write(tmp_path, [bench_round(0), bench_round(0)], "twice.jsonl")
    with pytest.raises(BenchFormatError, match="duplicate round id"):
        load_rounds(twice)


def test_reward_formula(tiny: Path) -> None:
    round_ = load_rounds(tiny)[0]  # relevant t-a, candidate tokens 10..13
    assert bench_budget_tokens(round_) == 13
    w = RewardWeights()
    hit = bench_reward(round_, ["t-a"])
    assert hit.components.s == 1.0 and hit.components.ht == 1.0
    assert hit.total == pytest.approx(w.ws + w.wr - w.wx * 10 / 13)
    miss = bench_reward(round_, ["t-b"])
    assert miss.components.ht == -1.0 and miss.total == pytest.approx(-w.wr - w.wx * 11 / 13)
    assert bench_reward(round_, []).total == pytest.approx(-w.wr)


def test_need_all_counts_a_hit_only_when_every_relevant_candidate_is_chosen(tmp_path: Path) -> None:
    needs_two = bench_round(0, slots=3, need="all")
    needs_two["relevant"] = ["t-a", "t-b"]
    path = _write(tmp_path, [needs_two, bench_round(1, slots=3)])
    both, single = load_rounds(path)
    assert both.need == "all" and single.need == "any"
    assert both.is_hit(["t-a", "t-b"]) and not both.is_hit(["t-a", "t-c"])
    assert both.recall(["t-a", "t-c"]) == 0.5 and single.is_hit(["t-a", "t-c"])
    partial = bench_reward(both, ["t-a", "t-c"])
    assert partial.components.s == 0.0 and partial.components.ht == -1.0
    assert bench_reward(both, ["t-a", "t-b"]).components.s == 1.0
    bad = bench_round(2, need="most")
    with pytest.raises(BenchFormatError, match="need"):
        load_rounds(_write(tmp_path, [bad], "bad-need.jsonl"))


def test_need_all_rounds_feed_the_missing_tools_back(tmp_path: Path) -> None:
    # one tool answers the round's words; the other is needed without being named (like cd for mv)
    rows = [bench_round(i, slots=2, need="all") for i in range(40)]
    for row in rows:
        row["query"] = f"weather forecast {row['id']}"
        row["relevant"] = ["t-a", "t-d"]
    rounds = load_rounds(_write(tmp_path, rows, "co.jsonl"))
    seen: list[tuple[str, ...]] = []
    factory = lambda seed: VWRouter(seed=seed, similarity=Similarity(), exploration="greedy")  # noqa: E731
    from memabra.evals.bench import run_router

    results, unseen = run_router(factory, rounds, 1, 0, on_decision=lambda sel, reward, r: seen.append(sel.chosen_ids))
    assert len(seen) == 40 and unseen
    assert not results[0].hit and results[-1].hit  # learned from the missing-tool feedback alone
    assert results[-1].recall == 1.0


def test_unseen_split_keeps_repeated_queries_together(tiny: Path) -> None:
    rounds = load_rounds(tiny)
    learn, score = split_unseen(rounds, seed=3)
    assert sorted(learn + score) == list(range(len(rounds)))
    queries = {rounds[i].query for i in learn}
    assert not queries & {rounds[i].query for i in score}
    assert abs(len(learn) - len(score)) <= 1 and split_unseen(rounds, seed=3) == (learn, score)


def test_report_has_the_documented_keys_and_is_seeded(tiny: Path) -> None:
    rounds = load_rounds(tiny)
    factories = router_factories(["hybrid", "random", "vw"], similarity=Similarity())
    report = run_bench(rounds, factories, passes=2, seed=1, source="tiny.jsonl")
    assert set(report) == {"file", "rounds", "passes", "seed", "rounds_unseen", "routers"}
    assert set(report["routers"]) == {"hybrid", "random", "vw"}
    for row in report["routers"].values():
        assert set(row) == ROUTER_KEYS
        assert 0.0 <= row["hit_rate"] <= 1.0 and row["decision_ms_p99"] >= row["decision_ms_p50"] > 0.0
        assert [p["pass"] for p in row["learning_curve"]][-1] == 2
    again = run_bench(rounds, factories, passes=2, seed=1)
    for name in report["routers"]:
        for key in ROUTER_KEYS - {"decision_ms_p50", "decision_ms_p99"}:
            assert report["routers"][name][key] == again["routers"][name][key]


def test_unknown_router_names() -> None:
    with pytest.raises(ValueError, match="unknown router"):
        router_factories(["vw", "oracle"], similarity=Similarity())


def test_cli_writes_json_and_plot(tiny: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(bench)
    out, png = tmp_path / "out.json", tmp_path / "curve.png"
    result = CliRunner().invoke(
        app,
        [
            str(tiny),
            "--routers",
            "hybrid,random",
            "--passes",
            "2",
            "--seed",
            "0",
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "hybrid" in result.output and "first" in result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    # the table shows what the README's tables quote: the unseen half's tokens beside its hit rate
    assert f"{report['routers']['hybrid']['tokens_mean_unseen']:.1f}" in result.output
    assert set(report["routers"]["hybrid"]) == ROUTER_KEYS
    # two nights' runs of one file name compare only where its content matches
    assert report["file_sha256"] == hashlib.sha256(tiny.read_bytes()).hexdigest()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    broken = CliRunner().invoke(app, [str(tmp_path / "missing.jsonl")])
    assert broken.exit_code == 1 and "cannot read" in broken.output


@pytest.mark.skipif(not BENCH_DIR.is_dir(), reason="shared/data/bench is not next to the repository")
@pytest.mark.slow
def test_first_pass_on_the_memory_file_matches_hybrid_and_later_passes_do_not_lose() -> None:
    rounds = load_rounds(BENCH_DIR / "memory_customer.jsonl")
    sim = Similarity()  # lexical only: fast, and the claim must hold for any prior
    report = run_bench(
        rounds,
        {"vw": lambda s: VWRouter(seed=s, similarity=sim), "hybrid": lambda s: HybridRouter(seed=s, similarity=sim)},
        passes=3,
        seed=0,
    )
    vw, hybrid = report["routers"]["vw"], report["routers"]["hybrid"]
    assert vw["hit_rate_first_pass"] >= hybrid["hit_rate_first_pass"]
    assert vw["hit_rate_last_pass"] >= hybrid["hit_rate_last_pass"]


def test_simulator_command_prints_the_oracle_share() -> None:
    from memabra._cli._simulate import simulate_command

    app = typer.Typer()
    app.command()(simulate_command)
    result = CliRunner().invoke(app, ["--rounds", "120", "--window", "50", "--routers", "hybrid,random"])
    assert result.exit_code == 0, result.output
    assert "oracle" in result.output and "hybrid" in result.output


def test_simulator_command_shows_no_share_where_the_oracle_earned_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window where the oracle's reward is 0 has no share: a dash in the table (null in the JSON),
    not a ZeroDivisionError."""
    import numpy as np

    import memabra.evals.simulator as simulator
    from memabra._cli._simulate import simulate_command

    class _Flat:
        tokens = np.zeros(100)

        def window(self, start: int, end: int) -> tuple[float, float]:
            return 0.0, 0.0

    monkeypatch.setattr(simulator, "simulate", lambda *args, **kwargs: _Flat())
    app = typer.Typer()
    app.command()(simulate_command)
    result = CliRunner().invoke(app, ["--rounds", "100", "--window", "50", "--routers", "random", "--json", "-"])
    assert result.exit_code == 0, result.output
    assert '"share_of_oracle": null' in result.output


def test_log_db_writes_the_first_routers_decisions_for_offline_evaluation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from memabra.evals.bench import DecisionLogWriter, load_rounds, router_factories, run_bench
    from memabra.router import Similarity
    from memabra.storage import EpisodeLog

    rounds = load_rounds(_write(tmp_path, [bench_round(i) for i in range(20)]))
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    factories = router_factories(["random", "hybrid"], Similarity(encoder=None))
    with DecisionLogWriter(url) as writer:
        report = run_bench(rounds, factories, 2, 0, on_decision=writer)
    assert writer.written == 40
    with EpisodeLog(url) as log:
        logged = [(sel, reward) for sel, reward in log.iter_selections()]
    assert len(logged) == 40 and all(reward is not None for _, reward in logged)
    assert all(sel.policy == "random" for sel, _ in logged)
    mean = sum(reward.total for _, reward in logged if reward is not None) / 40
    assert mean == pytest.approx(report["routers"]["random"]["reward_mean"])
