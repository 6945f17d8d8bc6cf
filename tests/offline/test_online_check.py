"""``memabra ope online RUN_ID``: after promoting snapshot B on an offline estimate made on policy
A's log, did B earn online what the run said? A log with A's decisions, an offline run of B,
then decisions B served with rewards the test controls."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logged_world import log_world, world
from memabra import ConfigError, Episode
from memabra._cli import app
from memabra._records import RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.evals.offline import MIN_ONLINE_DECISIONS, check_online, evaluate_on_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "240"})
# B: a stochastic policy the random log supports, so its estimate has a narrow interval
B = "random-b"


def _offline_run(log: EpisodeLog, lexical: Similarity, weights: RewardWeights | None = None) -> str:
    """A's decisions, then B's offline run on them (stored): B's run id."""
    log_world(log, RandomRouter(similarity=lexical, seed=1), 200)
    log.save_snapshot(replace(RandomRouter(similarity=lexical, seed=2).snapshot(), version=B))
    router = RandomRouter.restore(log.get_snapshot(B))
    ev = evaluate_on_log(
        log, router, policy=f"snapshot:{B}", snapshot_version=B, estimators=["cdr", "dm"], weights=weights
    )
    log.record_ope_results(list(ev.results))
    return ev.results[0].run_id


def _serve(
    log: EpisodeLog,
    lexical: Similarity,
    totals: list[float],
    *,
    version: str = B,
    weights: RewardWeights | None = None,
    final: bool = True,
) -> None:
    """B serving: one decision per total, each with that reward (S, then H for what S cannot
    hold, under the default weights), logged under ``version``."""
    router = RandomRouter.restore(log.get_snapshot(B))
    episodes = []
    for i, total in enumerate(totals):
        ctx, cands, _ = world(i)
        sel = replace(router.choose(ctx, cands), policy_version=version)
        s = min(1.0, max(-0.5, total))
        hm = min(1.0, max(-1.0, (total - s) / 0.35))
        reward = RewardBreakdown(RewardComponents(s=s, hm=hm), weights or RewardWeights())
        episodes.append(
            Episode("u1", ctx.query, selections=(sel,), reward=reward, finalized_at=utcnow() if final else None)
        )
    log.log_episodes(episodes)


def _around(mean: float, n: int, spread: float = 0.02) -> list[float]:
    return [min(1.35, max(-0.85, mean + (spread if i % 2 else -spread))) for i in range(n)]


def _offline(log: EpisodeLog, run_id: str) -> tuple[float, float, float]:
    (row,) = [r for r in log.list_ope_runs(limit=20) if r.run_id == run_id and r.details.get("recommended")]
    return row.value, row.ci_low, row.ci_high


def test_a_matched_estimate_came_true_on_the_cli(migrated_url: str, lexical: Similarity, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        run_id = _offline_run(log, lexical)
        value, low, high = _offline(log, run_id)
        _serve(log, lexical, _around(value, 40))  # B itself
        _serve(log, lexical, _around(value, 40), version=f"{B}+3")  # an online update of B
        _serve(log, lexical, [value] * 5, final=False)  # feedback still open: not counted
    out = tmp_path / "online.json"
    result = runner.invoke(app, ["ope", "online", run_id[:8], "--db", migrated_url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["run_id"] == run_id and doc["snapshot_version"] == B and doc["estimator"] == "cdr"
    assert doc["n_online"] == 80 and doc["n_unchanged"] == 40 and doc["n_pending"] == 5
    assert doc["offline"] == {"value": value, "ci_low": low, "ci_high": high}
    assert doc["online"]["value"] == pytest.approx(value, abs=1e-9)
    assert doc["online"]["ci_low"] < value < doc["online"]["ci_high"]
    assert doc["difference"]["ci_low"] < 0 < doc["difference"]["ci_high"]
    assert doc["online_inside_offline_interval"] is True and doc["verdict"].startswith("came true")
    assert doc["ci_method"] == "normal" and doc["alpha"] == 0.05
    notes = " ".join(doc["notes"])
    assert f"the offline target was {B}'s own stochastic policy, its exploration included" in notes
    assert f"40 of the 80 online decisions came from online updates of {B}" in notes
    text = " ".join(result.output.split())
    assert "online mean" in text and "verdict: came true" in text and "5 more not final yet" in text

    only = runner.invoke(app, ["ope", "online", run_id, "--db", migrated_url, "--unchanged-only", "--json", "-"])
    assert only.exit_code == 0, only.output
    assert json.loads(only.stdout)["n_online"] == 40


def test_an_estimate_that_missed_says_so(log: EpisodeLog, lexical: Similarity) -> None:
    run_id = _offline_run(log, lexical)
    value, low, high = _offline(log, run_id)
    worse = max(-0.85, low - 0.4)
    assert worse < low  # the online mean will lie below the offline interval
    _serve(log, lexical, _around(worse, 60))
    check = check_online(log, run_id)
    assert check.inside is False and check.difference.ci_high < 0
    assert check.verdict.startswith("did not come true: online the snapshot did worse")
    assert check.difference.value == pytest.approx(worse - value)


def test_too_few_final_rewards_are_refused(log: EpisodeLog, lexical: Similarity) -> None:
    run_id = _offline_run(log, lexical)
    _serve(log, lexical, _around(0.2, MIN_ONLINE_DECISIONS - 1))
    _serve(log, lexical, _around(0.2, 4), final=False)
    with pytest.raises(
        ConfigError, match=rf"served {MIN_ONLINE_DECISIONS - 1} decision\(s\) with a final reward.*4 more"
    ):
        check_online(log, run_id)


def test_a_change_of_reward_weights_is_refused_unless_allowed(migrated_url: str, lexical: Similarity) -> None:
    with EpisodeLog(migrated_url) as log:
        run_id = _offline_run(log, lexical)
        _serve(log, lexical, _around(0.2, 40), weights=RewardWeights(wc=0.8))
    result = runner.invoke(app, ["ope", "online", run_id, "--db", migrated_url])
    assert result.exit_code != 0
    assert "reward weights differ" in result.output and "wc=0.8" in result.output
    allowed = runner.invoke(app, ["ope", "online", run_id, "--db", migrated_url, "--allow-reward-change"])
    assert allowed.exit_code == 0, allowed.output
    assert "accepted though reward weights differ" in " ".join(allowed.output.split())


def test_a_run_under_weights_rescored_the_online_rewards_alike(log: EpisodeLog, lexical: Similarity) -> None:
    heavy = RewardWeights(ws=2.0)
    run_id = _offline_run(log, lexical, weights=heavy)
    _serve(log, lexical, _around(0.2, 40))  # logged under the default weights: re-scored, ws=2
    check = check_online(log, run_id)
    assert check.online.value == pytest.approx(0.4) and check.weights == heavy.as_dict()


def test_a_run_of_no_snapshot_or_an_unknown_id_is_refused(log: EpisodeLog, lexical: Similarity) -> None:
    log_world(log, RandomRouter(similarity=lexical, seed=1), 60)
    ev = evaluate_on_log(log, RandomRouter(similarity=lexical, seed=2), policy="random", estimators=["cdr"])
    log.record_ope_results(list(ev.results))
    with pytest.raises(ConfigError, match="not a saved snapshot"):
        check_online(log, ev.results[0].run_id)
    with pytest.raises(ConfigError, match="no stored OPE run with id 'nope'"):
        check_online(log, "nope")


def test_the_online_window_spans_every_batch_of_versions(
    log: EpisodeLog, lexical: Similarity, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot with many online updates is read a batch of versions at a time: the window's
    first and last decisions are the earliest and latest of all, not of the first and last batch."""
    import memabra.storage._offline as offline

    run_id = _offline_run(log, lexical)
    _serve(log, lexical, _around(0.2, 20), version=f"{B}+2")  # earlier; sorts after B+10
    _serve(log, lexical, _around(0.2, 20), version=f"{B}+10")  # later
    monkeypatch.setattr(offline, "_IN_CHUNK", 1)
    check = check_online(log, run_id)
    times = [d.created_at for d in offline.served_rewards(log.transactions, B, None, None)]
    assert check.n_online == 40
    assert check.first_decision_at == min(times) and check.last_decision_at == max(times)
    assert check.first_decision_at < check.last_decision_at


def test_a_stored_window_time_that_does_not_parse_reads_as_not_recorded() -> None:
    """A run's stored window is JSON anyone could have edited: an unparsable time is not recorded,
    a zone-less one is the UTC the log stores (comparing it with the decisions' aware times raised)."""
    from datetime import UTC, datetime

    from memabra.evals.offline._online import _time

    assert _time("yesterday") is None and _time(None) is None and _time(3) is None
    assert _time("2024-03-01T03:00:00") == datetime(2024, 3, 1, 3, tzinfo=UTC)
    assert _time("2024-03-01T04:00:00+01:00") == datetime(2024, 3, 1, 3, tzinfo=UTC)
