"""The VW router scores a decision with one prediction and carries the scores to later slots with
linear corrections read off VW (memabra.router._vw_decision_scores): those residuals must be VW's
own per-slot predictions, after learning, for every kind, position and open set."""

from __future__ import annotations

import numpy as np
import pytest

from memabra import Budget, Candidate, CandidateKind, CandidateStats, RoutingContext
from memabra.router import Similarity, VWRouter
from memabra.router._base import SlotView
from memabra.router._vw import IGNORE_LINEAR, INTERACTIONS
from memabra.router._vw_decision_scores import slot_invariant

WORDS = (
    "invoice refund shipping espresso grinder weather flight hotel recipe calendar email laptop garden train".split()
)
KINDS = (CandidateKind.MEMORY, CandidateKind.SKILL, CandidateKind.TOOL)


def _pool(rng: np.random.Generator) -> list[Candidate]:
    return [
        Candidate(
            f"c{i}",
            KINDS[i % 3],
            " ".join(rng.choice(WORDS, size=int(rng.integers(4, 12)))),
            int(rng.integers(20, 150)),
            {"source": ("notes", "crm")[i % 2]},
            usage=CandidateStats(int(rng.integers(0, 9)), 0),
        )
        for i in range(24)
    ]


def _trained(rng: np.random.Generator, pool: list[Candidate], **kwargs: object) -> VWRouter:
    router = VWRouter(similarity=Similarity(), **kwargs)  # type: ignore[arg-type]
    budget = Budget(max_tokens=600)
    for i in range(150):
        context = RoutingContext(" ".join(rng.choice(WORDS, size=5)), f"u{i % 4}", budget=budget)
        selection = router.choose(context, pool)
        outcomes = {cid: float(rng.random() < 0.4) for cid in selection.chosen_ids}
        router.learn(selection, float(rng.uniform(-1.0, 2.0)), outcomes)
    return router


def _views(rng: np.random.Generator, router: VWRouter, pool: list[Candidate]) -> list[SlotView]:
    context = RoutingContext(" ".join(rng.choice(WORDS, size=5)), "u1", budget=Budget(max_tokens=600))
    table = router.featurize(context, pool)
    views = []
    chosen: list[int] = []
    for kind in KINDS:
        members = [i for i, c in enumerate(table.candidates) if c.kind is kind]
        for position in range(6):  # past MAX_POSITION: positions are capped
            eligible = tuple(i for i in members if i not in chosen)
            views.append(SlotView(context, table, kind, len(views), position, eligible, tuple(chosen), None))
            chosen.append(int(rng.choice(eligible)))
    return views


def test_one_prediction_per_decision_reproduces_per_slot_predictions() -> None:
    rng = np.random.default_rng(3)
    pool = _pool(rng)
    router = _trained(rng, pool)
    assert router._per_decision
    for _ in range(5):
        for view in _views(rng, router, pool):
            fast = router._residuals(view)
            exact = router._predict(view)
            np.testing.assert_allclose(fast, exact, atol=1e-5)
            assert np.ptp(exact) > 1e-3  # the learned scores differ: the comparison means something


def test_decisions_are_the_same_with_per_slot_predictions() -> None:
    def run(per_decision: bool) -> list[tuple[str, ...]]:
        rng = np.random.default_rng(11)
        pool = _pool(rng)
        router = VWRouter(similarity=Similarity())
        router._ensure_state()
        router._per_decision = per_decision
        out = []
        for i in range(120):
            context = RoutingContext(" ".join(rng.choice(WORDS, size=5)), f"u{i % 4}", budget=Budget(max_tokens=600))
            selection = router.choose(context, pool)
            out.append(selection.chosen_ids)
            router.learn(
                selection, float(rng.uniform(-1.0, 2.0)), {c: float(rng.random() < 0.4) for c in selection.chosen_ids}
            )
        return out

    assert run(True) == run(False)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, True),
        ({"interactions": ("qa", "kp")}, False),  # position features crossed with similarity
        ({"interactions": ("qa", "ka")}, False),
        ({"interactions": ("qp",)}, False),  # rank features inside an interaction
        ({"ignore_linear": "quw"}, False),  # position features entering linearly
        ({"ignore": "k", "interactions": ("qa", "ka")}, True),
        ({"extra_args": "--nn 2"}, False),
    ],
)
def test_only_settings_that_keep_the_model_linear_in_the_slot_use_one_prediction(
    kwargs: dict[str, object], expected: bool
) -> None:
    params = {"interactions": INTERACTIONS, "ignore": "", "ignore_linear": IGNORE_LINEAR, "extra_args": ""}
    params.update(kwargs)
    assert (
        slot_invariant(params["interactions"], params["ignore"], params["ignore_linear"], params["extra_args"])
        is expected
    )  # type: ignore[arg-type]


def test_the_router_uses_one_prediction_per_decision() -> None:
    router = VWRouter(similarity=Similarity())
    router._ensure_state()
    assert router._per_decision


def test_per_slot_fallback_still_decides() -> None:
    rng = np.random.default_rng(5)
    pool = _pool(rng)
    router = _trained(rng, pool)
    router._per_decision = False
    view = _views(rng, router, pool)[1]
    np.testing.assert_array_equal(router._residuals(view), router._predict(view))
