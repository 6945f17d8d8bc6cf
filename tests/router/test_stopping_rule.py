"""The residual learners' stopping rule, on a learner whose residuals are scripted: stopping after a
pick needs a pick the learner knows serves the request, and once one is known good the prior's
optimism is withdrawn for the rest of the kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from memabra import STOP_ID, Budget, Candidate, CandidateKind, RouterError, RoutingContext
from memabra.router import ResidualRouter, Similarity
from memabra.router._base import SlotView

from .conftest import HashingEncoder

SIM = Similarity(encoder=HashingEncoder())
MEMORIES = tuple(
    Candidate(f"m{i}", CandidateKind.MEMORY, text, 30)
    for i, text in enumerate(
        [
            "the user lives in Seattle near the lake",
            "the user lives in a flat in Seattle",
            "the user likes oat milk lattes",
            "the grinder ships from the Portland warehouse",
        ]
    )
)
CONTEXT = RoutingContext(
    "where in Seattle does the user live", "u1", kinds=(CandidateKind.MEMORY,),
    budget=Budget(max_tokens=1000, slots={CandidateKind.MEMORY: 3}),
)


class ScriptedResidualRouter(ResidualRouter):
    """Residual cost per candidate id (0 when unscripted, 0 for stop); learns nothing."""

    name = "scripted"

    def __init__(self, *, residuals: Mapping[str, float] | None = None, **params: Any) -> None:
        super().__init__(similarity=SIM, **params)
        self.residuals = residuals

    def _residuals(self, view: SlotView) -> NDArray[np.float64]:
        scripted = dict(self.residuals or {})
        ids = [view.table.candidates[i].id for i in view.eligible]
        return np.array([scripted.get(cid, 0.0) for cid in ids] + [0.0])

    def _fit(self, view: SlotView, option: int, target: float, probability: float) -> None:
        return None


def _hybrid_order() -> list[str]:
    from memabra.router import HybridRouter

    return list(HybridRouter(similarity=SIM).choose(CONTEXT, MEMORIES).chosen_ids)


def test_unscripted_router_fills_every_slot_in_hybrid_order() -> None:
    selection = ScriptedResidualRouter().choose(CONTEXT, MEMORIES)
    assert list(selection.chosen_ids) == _hybrid_order()


def test_without_a_known_good_pick_later_slots_never_stop() -> None:
    # every candidate rated far worse than stopping: the first slot may stop (nothing injected) ...
    hopeless = {m.id: 5.0 for m in MEMORIES}
    assert ScriptedResidualRouter(residuals=hopeless).choose(CONTEXT, MEMORIES).chosen_ids == ()
    # ... but once a pick is in that the learner does not know to be good, the slots are filled
    leader = _hybrid_order()[0]
    unsure = {**hopeless, leader: -0.1}
    selection = ScriptedResidualRouter(residuals=unsure).choose(CONTEXT, MEMORIES)
    assert len(selection.chosen_ids) == 3
    assert selection.chosen_ids[0] == leader


@pytest.mark.parametrize("evidence_margin", [0.2, 0.4])
def test_a_known_good_pick_lets_the_router_stop(evidence_margin: float) -> None:
    leader = _hybrid_order()[0]
    offset = 0.5
    # learned just past the threshold -(prior_offset + evidence_margin), others untried (residual 0)
    known = {leader: -(evidence_margin + 0.05)}
    router = ScriptedResidualRouter(residuals=known, prior_offset=offset, prior_scale=0.0, evidence_margin=evidence_margin)
    selection = router.choose(CONTEXT, MEMORIES)
    assert selection.chosen_ids == (leader,)
    assert selection.slots[1].chosen_id == STOP_ID
    # the same pick short of the threshold: the prior's optimism keeps filling
    unsure = {leader: -(evidence_margin - 0.05)}
    router = ScriptedResidualRouter(residuals=unsure, prior_offset=offset, prior_scale=0.0, evidence_margin=evidence_margin)
    assert len(router.choose(CONTEXT, MEMORIES).chosen_ids) == 3


def test_after_a_known_good_pick_another_needs_evidence_of_its_own() -> None:
    order = _hybrid_order()
    known = {order[0]: -1.0, order[2]: -0.8}  # order[2] learned to help as well; order[1] untried
    router = ScriptedResidualRouter(residuals=known, prior_scale=0.0)
    chosen = router.choose(CONTEXT, MEMORIES).chosen_ids
    assert chosen == (order[0], order[2])


def test_replayed_probabilities_match_the_decision() -> None:
    leader = _hybrid_order()[0]
    router = ScriptedResidualRouter(residuals={leader: -1.5}, prior_scale=0.0)
    selection = router.choose(CONTEXT, MEMORIES)
    replayed = router.slot_probabilities(selection)
    assert [tuple(d.probabilities) for d in selection.slots] == [tuple(p) for p in replayed]


@pytest.mark.parametrize(("params", "name"), [({"local_weight": 0.5}, "local_weight"), ({"evidence_margin": -0.1}, "evidence_margin")])
def test_bad_stopping_parameters_name_themselves(params: dict[str, float], name: str) -> None:
    with pytest.raises(RouterError, match=name):
        ScriptedResidualRouter(**params).choose(CONTEXT, MEMORIES)
