"""Review of ``memabra ope online``'s reward-scale comparison: weights that differ must read
different in the refusal, a recorded scale is compared as the online rewards are read (every
weight, a left-out one at its default), and a recorded scale that makes no valid weights is
read from the log instead of ending in a traceback."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logged_world import log_world, world
from memabra import ConfigError, Episode
from memabra._cli import app
from memabra._feedback import recompute_rewards
from memabra._records import RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.evals.offline import check_online, evaluate_on_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog

B = "random-b"
runner = CliRunner(env={"COLUMNS": "240"})


def _run(log: EpisodeLog, lexical: Similarity, reward_scales: object = None) -> str:
    """A's decisions (default weights), then B's run on them, stored; ``reward_scales``, when
    given, in place of the scale the run recorded (as another writer or an older one kept it)."""
    log_world(log, RandomRouter(similarity=lexical, seed=1), 150)
    log.save_snapshot(replace(RandomRouter(similarity=lexical, seed=2).snapshot(), version=B))
    router = RandomRouter.restore(log.get_snapshot(B), similarity=lexical)
    ev = evaluate_on_log(log, router, policy=f"snapshot:{B}", snapshot_version=B, estimators=["cdr"])
    rows = ev.results
    if reward_scales is not None:
        rows = tuple(replace(r, details={**r.details, "reward_scales": reward_scales}) for r in rows)
    log.record_ope_results(rows)
    (headline,) = [r for r in rows if r.details.get("recommended")]
    return headline.run_id


def _serve(log: EpisodeLog, lexical: Similarity, weights: RewardWeights, n: int = 40) -> None:
    router = RandomRouter.restore(log.get_snapshot(B), similarity=lexical)
    episodes = []
    for i in range(n):
        ctx, cands, _ = world(i)
        reward = RewardBreakdown(RewardComponents(s=0.2 + (0.02 if i % 2 else -0.02)), weights)
        episodes.append(
            Episode("u1", ctx.query, selections=(router.choose(ctx, cands),), reward=reward, finalized_at=utcnow())
        )
    log.log_episodes(episodes)


def test_weights_that_differ_past_six_digits_read_different_in_the_refusal(
    log: EpisodeLog, lexical: Similarity
) -> None:
    run_id = _run(log, lexical)
    _serve(log, lexical, RewardWeights(wc=0.40000001))
    with pytest.raises(ConfigError) as caught:
        check_online(log, run_id)
    message = str(caught.value)
    # :g printed both as wc=0.4: "weights differ" between two identical lines
    assert "reward weights differ" in message and "wc=0.40000001" in message, message
    assert "wc=0.4 " in message  # the run's own stays short


def test_a_recorded_scale_that_leaves_out_default_weights_is_the_same_scale(
    log: EpisodeLog, lexical: Similarity
) -> None:
    # only ws kept: the others at their defaults, which the online rewards were scored under
    run_id = _run(log, lexical, reward_scales=[{"version": "v1", "weights": {"ws": 1}}])
    _serve(log, lexical, RewardWeights())
    check = check_online(log, run_id)  # refused before: the same weights printed on both sides
    assert check.n_online == 40
    assert not any("differ" in note or "did not record" in note for note in check.notes), check.notes


def test_a_recorded_scale_of_no_valid_weights_is_read_from_the_log_not_a_traceback(
    log: EpisodeLog, lexical: Similarity
) -> None:
    run_id = _run(log, lexical, reward_scales=[{"version": "v1", "weights": {"ws": 1, "bogus": 2}}])
    _serve(log, lexical, RewardWeights(wc=0.8))
    with pytest.raises(ConfigError, match=r"reward weights differ: the run scored under .*wc=0\.4.*wc=0\.8"):
        check_online(log, run_id)  # a TypeError from RewardWeights(bogus=...) before
    check = check_online(log, run_id, allow_reward_change=True)
    assert any("the reward scale the run recorded makes no valid weights" in note for note in check.notes), check.notes


def test_ope_runs_shows_the_reward_scale_an_as_logged_run_recorded(migrated_url: str, fill_log, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        fill_log(log, n=60)
    made = runner.invoke(app, ["ope", "log", "--db", migrated_url, "--policy", "random", "--estimators", "cdr"])
    assert made.exit_code == 0, made.output
    with EpisodeLog(migrated_url) as log:
        recompute_rewards(log, RewardWeights(wc=0.8))  # the log now reads wc=0.8; the run read wc=0.4
    out = tmp_path / "runs.json"
    listed = runner.invoke(app, ["ope", "runs", "--db", migrated_url, "--json", str(out)])
    assert listed.exit_code == 0, listed.output
    # "as logged" alone would now read as wc=0.8; the run's own scale says what it scored under
    assert "as logged" in listed.output and "wc=0.4 " in listed.output, listed.output
    (run,) = json.loads(out.read_text())["runs"]
    assert run["weights"] is None
    assert [s["weights"]["wc"] for s in run["reward_scales"]] == [0.4]
