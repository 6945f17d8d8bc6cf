"""Routers of one's own, written from docs/custom_router.md: the valid ones pass the conformance
suite, learn without private switches, keep their constructor arguments through a snapshot, and
never change their input; a router that does is stopped with a message that says so."""

from __future__ import annotations

import numpy as np
import pytest

from memabra import Budget, CandidateKind, RouterError, RoutingContext
from memabra.router import Router, Similarity, check_router

from .conftest import HashingEncoder
from .custom_routers import PopularityRouter, RenamedArgument, ScalingInPlace, TemperatureRouter, ThompsonRouter

SIM = Similarity(encoder=HashingEncoder())
TOOLS = RoutingContext(
    query="weather in seattle", user_id="u1", budget=Budget(max_tokens=200, slots={CandidateKind.TOOL: 1})
)


def _pool():  # type: ignore[no-untyped-def]
    from memabra.router._conformance import conformance_candidates

    return conformance_candidates()


@pytest.mark.parametrize("cls", [PopularityRouter, ThompsonRouter, TemperatureRouter])
def test_a_valid_custom_router_conforms(cls: type[Router]) -> None:
    check_router(lambda seed: cls(seed=seed, similarity=SIM))


def test_a_class_that_defines_update_learns_without_saying_so() -> None:
    # PopularityRouter defines _update and nothing else about learning: it used to be skipped
    # silently (``learns`` stayed False), so the router never changed and still passed the suite
    assert PopularityRouter.learns and ThompsonRouter.learns and not TemperatureRouter.learns
    router = PopularityRouter(similarity=SIM)
    for _ in range(5):
        selection = router.choose(TOOLS, _pool())
        router.learn(selection, 1.0, {cid: float(cid == "t-calc") for cid in selection.chosen_ids})
    assert router.counts["u1"] and router.policy_version.endswith("+5")


def test_an_explicit_learns_false_is_kept() -> None:
    class Frozen(PopularityRouter):
        name = "frozen"
        learns = False

        def _update(self, *args: object) -> None:
            raise AssertionError("a router with learns = False is not updated")

    router = Frozen(similarity=SIM)
    selection = router.choose(TOOLS, _pool())
    router.learn(selection, 1.0)
    assert "+" not in router.policy_version


def test_kwargs_forwarded_to_router_survive_a_snapshot() -> None:
    router = TemperatureRouter(0.5, seed=7, min_probability=0.02, recall_limit=3, similarity=SIM)
    assert router.get_params() == {
        "temperature": 0.5,
        "seed": 7,
        "min_probability": 0.02,
        "recall_limit": 3,
        "unused_penalty": 0.3,
        "max_pending": 100_000,
    }
    back = TemperatureRouter.restore(router.snapshot(), similarity=SIM)
    assert (back.temperature, back.seed, back.min_probability, back.recall_limit) == (0.5, 7, 0.02, 3)
    assert back.choose(TOOLS, _pool()).slots == router.choose(TOOLS, _pool()).slots


def test_an_argument_kept_under_another_name_is_named() -> None:
    with pytest.raises(RouterError, match=r"takes 'temperature' but the router has no attribute 'temperature'"):
        RenamedArgument(similarity=SIM).choose(TOOLS, _pool())


def test_a_router_cannot_change_the_features_it_is_given() -> None:
    router = ScalingInPlace(2.0, similarity=SIM)
    table = router.featurize(TOOLS, _pool())
    before = table.matrix.copy()
    with pytest.raises(RouterError, match=r"wrote into the slot's feature table.*copy a column"):
        router.choose(TOOLS, _pool(), features=table)
    assert np.array_equal(table.matrix, before)
    logged = TemperatureRouter(2.0, similarity=SIM).choose(TOOLS, _pool())
    with pytest.raises(RouterError, match="wrote into the slot's feature table"):
        router.slot_probabilities(logged)


def test_the_built_in_learners_still_read_a_read_only_table() -> None:
    from memabra.router import LinearRouter

    router = LinearRouter(similarity=SIM)
    table = router.featurize(TOOLS, _pool())
    table.matrix.flags.writeable = False
    selection = router.choose(TOOLS, _pool(), features=table)
    router.learn(selection, 1.0, dict.fromkeys(selection.chosen_ids, 1.0))
    assert router.slot_probabilities(selection)
