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
    floor = exploration_floor(costs.size, 2, 0.1)
    assert p.sum() == pytest.approx(1.0) and floor == pytest.approx(0.1 / 3)
    assert p[1] == pytest.approx(0.9 + floor)  # the best
    assert p[3] == pytest.approx(floor) and p[-1] == pytest.approx(floor)  # second best and stop
    assert p[[0, 2, 4]].tolist() == [0.0, 0.0, 0.0]  # outside the top-M: only the router's min_probability
    assert explore(costs, "greedy", 0.1, 2).tolist() == [0, 1, 0, 0, 0, 0]


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
