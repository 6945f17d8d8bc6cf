"""The probability floor, the seeded draw, and per-slot credit attribution."""

from __future__ import annotations

import numpy as np
import pytest

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    RouterError,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
)
from memabra.router import slot_credits
from memabra.router._sampling import apply_floor, check_distribution, draw_index


def test_floor_mixes_with_uniform() -> None:
    p = apply_floor(np.array([1.0, 0.0, 0.0, 0.0]), 0.01)
    assert p.min() == pytest.approx(0.01) and p.sum() == pytest.approx(1.0)
    assert p[0] == pytest.approx(1.0 - 0.03)
    np.testing.assert_allclose(apply_floor(np.array([0.9, 0.1]), 0.6), [0.5, 0.5])
    np.testing.assert_array_equal(apply_floor(np.array([0.9, 0.1]), 0.0), [0.9, 0.1])


def test_distribution_checks_name_the_problem() -> None:
    with pytest.raises(RouterError, match="non-finite"):
        check_distribution(np.array([np.nan, 1.0]), "x")
    with pytest.raises(RouterError, match="negative"):
        check_distribution(np.array([-0.5, 1.5]), "x")
    with pytest.raises(RouterError, match="summing"):
        check_distribution(np.array([0.5, 0.4]), "x")


def test_draw_is_seeded_and_never_picks_zero_mass() -> None:
    p = np.array([0.0, 0.7, 0.0, 0.3, 0.0])
    draws = [draw_index(p, np.random.default_rng(s)) for s in range(400)]
    assert set(draws) == {1, 3}
    assert abs(draws.count(1) / 400 - 0.7) < 0.08
    assert draw_index(p, np.random.default_rng(5)) == draw_index(p, np.random.default_rng(5))


def _selection() -> Selection:
    pool = (
        Candidate("m1", CandidateKind.MEMORY, "one", 100),
        Candidate("m2", CandidateKind.MEMORY, "two", 300),
        Candidate("t1", CandidateKind.TOOL, "tool", 50),
    )
    offered = tuple(ScoredCandidate(c, {}, 0.0, i) for i, c in enumerate(pool))
    slots = (
        SlotDraw(0, CandidateKind.MEMORY, ("m1", "m2", STOP_ID), (0.8, 0.1, 0.1), "m1", 0.8),
        SlotDraw(1, CandidateKind.MEMORY, ("m2", STOP_ID), (0.6, 0.4), "m2", 0.6),
        SlotDraw(2, CandidateKind.TOOL, ("t1", STOP_ID), (0.5, 0.5), STOP_ID, 0.5),
    )
    context = RoutingContext("q", "u", budget=Budget(max_tokens=1000))
    return Selection(context, offered, slots, "test", "v1", 0)


def test_without_outcomes_every_slot_shares_the_reward() -> None:
    credits = slot_credits(_selection(), 0.7, None, unused_penalty=0.3)
    assert [c.credit for c in credits] == [0.7, 0.7, 0.7]
    assert all(c.stop_credit is None for c in credits)
    assert not any(c.local for c in credits)


def test_with_outcomes_attribution_is_marginal() -> None:
    weights = RewardWeights()
    reward = RewardBreakdown(RewardComponents(s=1.0, hm=0.5, x=0.4), weights)
    credits = slot_credits(_selection(), reward, {"m1": 1.0, "m2": 0.0}, unused_penalty=0.3)
    assert credits[0].credit == pytest.approx(reward.total)
    kappa = weights.wr * 0.3 + weights.wx * 300 / 1000
    assert credits[1].credit == pytest.approx(-kappa)
    assert credits[0].stop_credit == 0.0 and credits[1].stop_credit == 0.0
    # no tool had an outcome, so stopping the tools shares the slate's reward
    assert credits[2].credit == pytest.approx(reward.total) and credits[2].stop_credit is None
    partial = slot_credits(_selection(), 1.0, {"m1": 0.5}, unused_penalty=0.0)
    assert partial[0].credit == pytest.approx(0.5 - 0.5 * RewardWeights().wx * 0.1)
    assert partial[1].credit == 1.0  # m2 has no local signal
    # direct evidence (learned with local_weight) only where the slot's own outcome is known
    assert [c.local for c in credits] == [True, True, False]
    assert [c.local for c in partial] == [True, False, False]


@pytest.mark.parametrize(
    ("outcomes", "message"),
    [({"t1": 1.0}, "did not choose"), ({"m1": 1.5}, r"\[0, 1\]"), ({"m1": float("inf")}, "not finite")],
)
def test_bad_outcomes(outcomes: dict[str, float], message: str) -> None:
    with pytest.raises(RouterError, match=message):
        slot_credits(_selection(), 1.0, outcomes, unused_penalty=0.3)
    with pytest.raises(RouterError, match="not finite"):
        slot_credits(_selection(), float("nan"), None, unused_penalty=0.3)
