"""``memabra ope online`` compares the online rewards with the reward scale the run read, not with
the log as it reads at check time: ``memabra rewards recompute`` (how docs/configuration.md
changes the weights) re-totals the run's rewards in place, after which the log would say the run
scored under the new weights. Also: a run whose decisions are gone, and an unsupported run."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from logged_world import log_world, world
from memabra import ConfigError, Episode
from memabra._feedback import recompute_rewards
from memabra._records import OPEResult, RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.evals.offline import check_online, evaluate_on_log
from memabra.evals.offline._run_record import reward_scales_json, with_run_record
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog

B = "random-b"
NEW = RewardWeights(wc=0.8)


def _run(
    log: EpisodeLog, lexical: Similarity, *, record_scale: bool, unsupported: bool = False
) -> tuple[str, OPEResult]:
    """A's decisions (default weights), then B's run on them, stored; with ``record_scale`` it
    keeps the reward scale it read, as a run made by ``ope log`` now does (without: as one stored
    before runs recorded it)."""
    log_world(log, RandomRouter(similarity=lexical, seed=1), 150)
    log.save_snapshot(replace(RandomRouter(similarity=lexical, seed=2).snapshot(), version=B))
    router = RandomRouter.restore(log.get_snapshot(B), similarity=lexical)
    ev = evaluate_on_log(log, router, policy=f"snapshot:{B}", snapshot_version=B, estimators=["cdr"])
    # the run records the scale it read itself (evaluate_on_log), as `ope log` stores it
    assert all(
        r.details["reward_scales"] == reward_scales_json([("v1", RewardWeights().as_dict())]) for r in ev.results
    )
    extra: dict[str, object] = {}
    if unsupported:
        extra["supported"] = False
    dropped = () if record_scale else ("reward_scales",)  # a run stored before runs recorded it
    rows = [
        replace(r, details={**{k: v for k, v in r.details.items() if k not in dropped}, **extra}) for r in ev.results
    ]
    log.record_ope_results(rows)
    (headline,) = [r for r in rows if r.details.get("recommended")]
    return headline.run_id, headline


def _serve(log: EpisodeLog, lexical: Similarity, mean: float, weights: RewardWeights, n: int = 40) -> None:
    router = RandomRouter.restore(log.get_snapshot(B), similarity=lexical)
    episodes = []
    for i in range(n):
        ctx, cands, _ = world(i)
        reward = RewardBreakdown(RewardComponents(s=mean + (0.02 if i % 2 else -0.02)), weights)
        episodes.append(
            Episode("u1", ctx.query, selections=(router.choose(ctx, cands),), reward=reward, finalized_at=utcnow())
        )
    log.log_episodes(episodes)


def test_a_recompute_after_the_run_is_refused_on_the_scale_the_run_recorded(
    log: EpisodeLog, lexical: Similarity
) -> None:
    run_id, _ = _run(log, lexical, record_scale=True)
    recompute_rewards(log, NEW)  # the run's rewards, re-totalled in place: the log now says wc=0.8
    _serve(log, lexical, 0.2, NEW)
    with pytest.raises(ConfigError, match=r"reward weights differ: the run scored under .*wc=0\.4.*wc=0\.8"):
        check_online(log, run_id)
    allowed = check_online(log, run_id, allow_reward_change=True)
    assert any(note.startswith("accepted though reward weights differ") for note in allowed.notes)
    assert not any("did not record the reward scale" in note for note in allowed.notes)


def test_a_run_that_did_not_record_its_scale_says_it_was_read_from_the_log_now(
    log: EpisodeLog, lexical: Similarity
) -> None:
    run_id, _ = _run(log, lexical, record_scale=False)
    recompute_rewards(log, NEW)
    _serve(log, lexical, 0.2, NEW)
    check = check_online(log, run_id)  # nothing tells the re-total: the log is all it has
    assert any(
        "the run did not record the reward scale it read" in note and "memabra rewards recompute" in note
        for note in check.notes
    ), check.notes


def test_a_run_whose_decisions_are_gone_says_so(log: EpisodeLog, lexical: Similarity) -> None:
    run_id, _ = _run(log, lexical, record_scale=False)
    cut = utcnow()
    log.delete_episodes(before=cut, include_unlearned=True)  # retention took the run's decisions
    _serve(log, lexical, 0.2, RewardWeights())
    with pytest.raises(ConfigError) as caught:
        check_online(log, run_id, since=cut - timedelta(seconds=1))
    message = str(caught.value)
    assert "the decisions the run read are not in the log any more" in message
    assert "version -" not in message and "scored under ," not in message


def test_a_run_that_recorded_its_scale_needs_no_decision_of_its_own(log: EpisodeLog, lexical: Similarity) -> None:
    run_id, _ = _run(log, lexical, record_scale=True)
    cut = utcnow()
    log.delete_episodes(before=cut, include_unlearned=True)
    _serve(log, lexical, 0.2, RewardWeights())
    check = check_online(log, run_id, since=cut - timedelta(seconds=1))
    assert check.n_online == 40 and not any("scale" in note for note in check.notes)


def test_an_unsupported_run_inside_its_bounds_gets_no_verdict(log: EpisodeLog, lexical: Similarity) -> None:
    run_id, headline = _run(log, lexical, record_scale=True, unsupported=True)
    _serve(log, lexical, headline.value, RewardWeights())
    check = check_online(log, run_id)
    assert check.inside and check.supported is False
    assert check.verdict.startswith("no verdict: the offline run was unsupported"), check.verdict


def test_the_run_record_keeps_the_reward_scales_it_is_given() -> None:
    row = OPEResult(policy="p", estimator="cdr", value=0.1, ci_low=0.0, ci_high=0.2, n_rounds=10)
    scales = [("v1", {"wc": 0.8, "ws": 1.0}), ("v1", {"ws": 1.0, "wc": 0.8}), ("v0", {"ws": 1})]
    (kept,) = with_run_record([row], {}, 0.1, 0.01, 0.05, {}, reward_scales=scales)
    assert kept.details["reward_scales"] == [
        {"version": "v0", "weights": {"ws": 1.0}},
        {"version": "v1", "weights": {"wc": 0.8, "ws": 1.0}},
    ]
    (plain,) = with_run_record([row], {}, 0.1, 0.01, 0.05, {})
    assert "reward_scales" not in plain.details
