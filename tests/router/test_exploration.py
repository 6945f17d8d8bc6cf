"""Exploration on by default (top-M epsilon-greedy), the learners' prior under exploration, and
what the features carry between requests: missing tools, co-needed tools and how many to inject."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from memabra import Budget, Candidate, CandidateKind, RoutingContext
from memabra.router import HybridRouter, LinearRouter, Router, Similarity, VWRouter
from memabra.router._exploration import exploration_floor, explore

from .conftest import HashingEncoder

SIM = Similarity(encoder=HashingEncoder())
LEARNERS: dict[str, Callable[..., Router]] = {
    "vw": lambda **kw: VWRouter(similarity=SIM, **kw),
    "linear": lambda **kw: LinearRouter(similarity=SIM, **kw),
}
TOOLS = tuple(
    Candidate(name, CandidateKind.TOOL, f"{name}: {text}", 15)
    for name, text in [
        ("mv", "move a file to another directory"),
        ("cd", "change the current working directory"),
        ("ls", "list the files of the current directory"),
        ("post_tweet", "post a message to twitter"),
        ("authenticate", "log in to the social media account with a password"),
        ("get_weather", "forecast for a city"),
    ]
)
BUDGET = Budget(max_tokens=200, slots={CandidateKind.TOOL: 3})


def _context(query: str) -> RoutingContext:
    return RoutingContext(query, "u1", kinds=(CandidateKind.TOOL,), budget=BUDGET)


def test_top_m_epsilon_gives_the_explored_set_its_floor() -> None:
    costs = np.array([0.3, -0.2, 0.9, 0.1, 0.5, 0.0])  # five candidates, then stop
    p = explore(costs, "epsilon", 0.1, 2)
    assert p.sum() == pytest.approx(1.0)
    # every explored option gets the floor ε / (2M + 1) = 0.02, whatever the size of the set
    assert p[1] == pytest.approx(1.0 - 2 * 0.02)  # the best
    assert p[3] == pytest.approx(0.02) and p[-1] == pytest.approx(0.02)  # second best and stop
    assert p[[0, 2, 4]].tolist() == [0.0, 0.0, 0.0]  # outside the top-M: only the router's min_probability
    assert explore(costs, "greedy", 0.1, 2).tolist() == [0, 1, 0, 0, 0, 0]


def test_the_priors_top_m_joins_the_explored_set_and_the_floor_bounds_every_member() -> None:
    costs = np.array([0.3, -0.2, 0.9, 0.1, 0.5, 0.0])
    prior = np.array([-0.6, -0.5, -0.4, -0.3, -0.2, 0.0])  # the prior prefers candidates 0 and 1
    p = explore(costs, "epsilon", 0.1, 2, prior=prior)
    # explored: the learner's top-2 {1, 3}, the prior's top-2 {0, 1}, stop: four options
    assert p[1] == pytest.approx(1.0 - 3 * 0.02)
    assert p[[0, 3, 5]].tolist() == pytest.approx([0.02] * 3) and p[[2, 4]].tolist() == [0.0, 0.0]
    assert min(p[[0, 1, 3, 5]]) >= exploration_floor(costs.size, 2, 0.1) == pytest.approx(0.1 / 5)
    moded = explore(costs, "epsilon", 0.1, 2, prior=prior, mode=0)
    assert moded[0] == pytest.approx(1.0 - 3 * 0.02) and moded[1] == pytest.approx(0.02)


def test_a_small_explored_set_spends_less_than_epsilon() -> None:
    """Two candidates and stop: each non-best option keeps the floor, the rest stays on the best."""
    p = explore(np.array([-0.5, -0.1, 0.0]), "epsilon", 0.01, 4)
    assert p.tolist() == pytest.approx([1.0 - 2 * 0.01 / 9, 0.01 / 9, 0.01 / 9])


def test_the_prior_share_decays_to_its_floor() -> None:
    from memabra.router._exploration import PRIOR_FLOOR, PRIOR_SHARE, prior_share

    assert prior_share(0) == PRIOR_SHARE
    assert PRIOR_FLOOR < prior_share(100) < PRIOR_SHARE
    assert prior_share(10**6) == PRIOR_FLOOR


def test_prior_mixture_conditionals_are_the_posterior_weighted_components() -> None:
    """Hand-computed: two slots, a learner and two references of share δ each; after a draw the
    components give different probabilities, each one's weight is δ_k P_k / Σ_j δ_j P_j with each
    component's probability P_k of that draw."""
    from memabra.router._exploration import PRIOR_SHARE, EpsilonGreedy, PriorMixture
    from memabra.router._slots import SlotView

    context = _context("move a file")
    table = LinearRouter(similarity=SIM).featurize(context, TOOLS)
    mixture = PriorMixture()
    shares = (1 - 2 * PRIOR_SHARE, PRIOR_SHARE, PRIOR_SHARE)
    # floor 0.1 on all three options; the learner's mode is option 0, the references' 1 and 2
    slot0 = EpsilonGreedy(3, {0, 1, 2}, 0.1, 0, (1, 2))
    learner0, prior0, lexical0 = np.array([0.8, 0.1, 0.1]), np.array([0.1, 0.8, 0.1]), np.array([0.1, 0.1, 0.8])
    for k, expected in enumerate((learner0, prior0, lexical0)):
        assert [slot0.probability(k, option) for option in range(3)] == pytest.approx(expected)
    view0 = SlotView(context, table, CandidateKind.TOOL, 0, 0, (0, 1), (), 200)
    first = mixture.slot(view0, slot0, shares)
    assert first == pytest.approx(shares[0] * learner0 + PRIOR_SHARE * (prior0 + lexical0))
    # floor 0.4 on both options; the learner's and the BM25 reference's mode is option 0, hybrid's 1
    slot1 = EpsilonGreedy(2, {0, 1}, 0.4, 0, (1, 0))
    learner1, prior1, lexical1 = np.array([0.6, 0.4]), np.array([0.4, 0.6]), np.array([0.6, 0.4])
    view1 = SlotView(context, table, CandidateKind.TOOL, 1, 1, (0,), (1,), 185)
    second = mixture.slot(view1, slot1, shares)
    weights = np.array([shares[0] * 0.1, PRIOR_SHARE * 0.8, PRIOR_SHARE * 0.1])  # candidate 1 was drawn
    weights /= weights.sum()
    assert second == pytest.approx(weights[0] * learner1 + weights[1] * prior1 + weights[2] * lexical1)


def test_epsilon_greedy_mixture_matches_the_component_arrays_bit_for_bit() -> None:
    """The compact mixture equals the sum of the components' arrays taken in order, including a
    mode outside the explored set and a component of weight 0."""
    from memabra.router._exploration import EpsilonGreedy

    rng = np.random.default_rng(0)
    for _ in range(200):
        size = int(rng.integers(2, 12))
        explored = {int(i) for i in rng.choice(size, size=int(rng.integers(1, size + 1)), replace=False)}
        best, hybrid_mode, lexical_mode = (int(i) for i in rng.integers(0, size, size=3))
        components = EpsilonGreedy(size, explored, 0.01 / 9, best, (hybrid_mode, lexical_mode))
        arrays = [np.array([components.probability(k, option) for option in range(size)]) for k in range(3)]
        weights = [float(rng.random()), float(rng.random()), 0.0]
        expected = weights[0] * arrays[0]
        for weight, array in zip(weights[1:], arrays[1:], strict=True):
            if weight > 0.0:
                expected = expected + weight * array
        assert components.mixture(weights).tolist() == expected.tolist()


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_learners_explore_by_default_and_keep_the_hybrid_order_as_their_mode(name: str) -> None:
    router = LEARNERS[name]()
    assert router.exploration == "epsilon" and router.epsilon > 0.0
    context = _context("move the report file into the archive directory")
    hybrid = HybridRouter(similarity=SIM).choose(context, TOOLS)
    selection = router.choose(context, TOOLS, seed=1)
    modes = []
    for draw in selection.slots:
        assert min(draw.probabilities) > 0.0
        modes.append(draw.candidate_ids[int(np.argmax(draw.probabilities))])
    assert modes[0] == hybrid.chosen_ids[0]


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_a_missing_tool_is_learned_without_ever_being_drawn(name: str) -> None:
    router = LEARNERS[name](exploration="greedy")
    budget = Budget(max_tokens=200, slots={CandidateKind.TOOL: 1})
    context = RoutingContext("move the report file into the archive", "u1", kinds=(CandidateKind.TOOL,), budget=budget)
    first = router.choose(context, TOOLS)
    assert first.chosen_ids == ("mv",)
    for _ in range(3):
        selection = router.choose(context, TOOLS)
        chosen = selection.chosen_ids
        missing = [cid for cid in ("mv", "cd") if cid not in chosen]
        router.learn(selection, -0.35, {cid: float(cid in ("mv", "cd")) for cid in chosen}, missing=missing)
    # with one slot the router keeps the tool it learned most about; both now beat the others
    assert router.choose(context, TOOLS).chosen_ids[0] in ("mv", "cd")


def test_co_needed_tools_carry_over_to_requests_never_seen() -> None:
    router = LinearRouter(similarity=SIM, exploration="greedy")
    train = [
        "move notes.txt into the drafts directory",
        "move the photo to the pictures directory",
        "move budget.xlsx into the finance directory",
        "move the old logs into the backup directory",
    ]
    for _ in range(3):
        for query in train:
            selection = router.choose(_context(query), TOOLS)
            chosen = selection.chosen_ids
            missing = [cid for cid in ("mv", "cd") if cid not in chosen]
            outcomes = {cid: float(cid in ("mv", "cd")) for cid in chosen}
            router.learn(selection, 1.2 if not missing else -0.35, outcomes, missing=missing)
    unseen = router.choose(_context("move the invoice into the taxes directory"), TOOLS)
    assert {"mv", "cd"} <= set(unseen.chosen_ids)


def test_the_floored_mixture_is_the_mixture_mixed_with_uniform() -> None:
    """What a slot draws from (``mixture_values``) is ``apply_floor`` of the mixture, up to the
    renormalisation's rounding, and a floor too large for the options gives the uniform."""
    from memabra.router._exploration import EpsilonGreedy
    from memabra.router._sampling import apply_floor

    rng = np.random.default_rng(1)
    for _ in range(200):
        size = int(rng.integers(2, 40))
        explored = {int(i) for i in rng.choice(size, size=int(rng.integers(1, min(size, 9) + 1)), replace=False)}
        best, hybrid_mode, lexical_mode = (int(i) for i in rng.integers(0, size, size=3))
        components = EpsilonGreedy(size, explored, 0.01 / 9, best, (hybrid_mode, lexical_mode))
        weights = [0.9, 0.05, 0.05]
        values = components.mixture_values(weights, 1e-5)
        expected = apply_floor(components.mixture(weights), 1e-5)
        np.testing.assert_allclose(values, expected, rtol=0.0, atol=1e-15)
        assert abs(sum(values) - 1.0) < 1e-12 and min(values) >= 1e-5 * (1 - 1e-12)
    assert EpsilonGreedy(4, {0, 3}, 0.1, 0).mixture_values([1.0], 0.3) == (0.25,) * 4
