"""The conformance suite rejects a custom router that breaks a contract the rest of the suite let
through, each with a message that names what is wrong."""

from __future__ import annotations

import pytest

from memabra import RouterError, SnapshotError
from memabra.router import Router, Similarity, check_router, load_router

from .conftest import HashingEncoder
from .custom_routers import (
    ForgetfulMean,
    GreedyDrawer,
    KeywordsOnlyForSeed,
    LearnsInLearn,
    PickledSGD,
    PopularityRouter,
    RenamedArgument,
    SampledThompson,
    ScalingInPlace,
)

SIM = Similarity(encoder=HashingEncoder())


@pytest.mark.parametrize(
    ("cls", "error", "message"),
    [
        # logs probability 1 for a pick that the decision's seed makes random: every replay matched
        (SampledThompson, AssertionError, "must depend on the model and the slot only"),
        # logs the softmax but draws with a fixed generator: seeded, replayable and wrong
        (GreedyDrawer, AssertionError, "what is drawn must follow what is logged"),
        # a snapshot that keeps the means and loses the counts predicted alike until the next reward
        (ForgetfulMean, AssertionError, "restored router .* learned state"),
        # changed the caller's features in place and passed
        (ScalingInPlace, RouterError, "wrote into the slot's feature table"),
        # failed with an AttributeError from get_params
        (RenamedArgument, RouterError, "store every constructor argument under its own name"),
        # learned in the bench and never in memabra learner (learn_logged): passed
        (LearnsInLearn, AssertionError, "LearnsInLearn overrides learn: learn in _update"),
        # equal models, other pickle bytes: was blamed on state left out of the snapshot
        (PickledSGD, AssertionError, "_model_bytes returns a pickle, whose bytes depend on object identity"),
    ],
)
def test_a_broken_custom_router_is_rejected(cls: type[Router], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_router(lambda seed: cls(seed=seed, similarity=SIM))


def test_a_constructor_that_restore_cannot_call_is_named() -> None:
    # was: "unusable learner_args: ... got an unexpected keyword argument 'similarity'" and no more
    with pytest.raises(
        SnapshotError, match=r"rebuilds the router as KeywordsOnlyForSeed\(\*\*get_params\(\), similarity"
    ):
        check_router(lambda seed: KeywordsOnlyForSeed(seed=seed))


def test_a_snapshot_of_a_router_of_ones_own_says_how_to_load_it() -> None:
    snapshot = PopularityRouter(similarity=SIM).snapshot()
    with pytest.raises(SnapshotError, match=r"unknown policy 'popularity'.*classes=\[MyRouter\].*module:Class"):
        load_router(snapshot)
    assert isinstance(load_router(snapshot, classes=[PopularityRouter], similarity=SIM), PopularityRouter)
