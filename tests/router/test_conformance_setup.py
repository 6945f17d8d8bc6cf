"""check_router's checks of what it is given and of a router's name, inputs and snapshot hooks: each
broken toy router here passed the suite, or failed it with an error that did not say what to fix."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from memabra import Budget, Candidate, RoutingContext, Selection
from memabra.router import FeatureTable, LinearRouter, Router, Similarity, SlotView, check_router

from .conftest import HashingEncoder
from .custom_routers import PopularityRouter, TemperatureRouter

SIM = Similarity(encoder=HashingEncoder())


class Unnamed(TemperatureRouter):
    name = Router.name  # as a class that never sets name inherits it


class NamedLinear(TemperatureRouter):
    name = "linear"


class NoisyRouter(TemperatureRouter):
    """Adds unseeded noise, as an uncached LLM reranker's scores vary from call to call."""

    name = "noisy"

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        p = super()._slot_distribution(view) + np.random.default_rng().random(view.n_options) * 0.01
        return p / p.sum()


class SortsInPlace(TemperatureRouter):
    """Ranks the caller's list in place before choosing (the suite used to pass a tuple)."""

    name = "sorts-in-place"

    def choose(self, context: RoutingContext, candidates: Sequence[Candidate], budget: Budget | None = None, *,
               features: FeatureTable | None = None, seed: int | None = None) -> Selection:  # fmt: skip
        if isinstance(candidates, list):
            candidates.sort(key=lambda c: c.tokens)
        return super().choose(context, candidates, budget, features=features, seed=seed)


class NumpyExtraState(PopularityRouter):
    name = "numpy-extra-state"

    def _extra_state(self) -> dict[str, Any]:
        return {"users": np.float32(len(self.counts))}


class TextModel(PopularityRouter):
    name = "text-model"

    def _model_bytes(self) -> bytes:
        return json.dumps(self.counts, sort_keys=True)  # type: ignore[return-value]  # the bug under test


@pytest.mark.parametrize(
    ("factory", "error", "message"),
    [
        # every selection of it was logged as the base class's "router"
        (lambda seed: Unnamed(seed=seed, similarity=SIM), AssertionError, "no policy name of its own"),
        # logged under the built-in's name; its snapshots restored into LinearRouter
        (lambda seed: NamedLinear(seed=seed, similarity=SIM), AssertionError, "is the built-in LinearRouter's"),
        # a factory that drops the seed: every seed of a bench ran the same router
        (lambda seed: TemperatureRouter(similarity=SIM), AssertionError, "must pass its seed on"),
        (lambda seed: SortsInPlace(seed=seed, similarity=SIM), AssertionError, "changed the candidate list"),
        # used to say only "same seed, same input: different selection"
        (lambda seed: NoisyRouter(seed=seed, similarity=SIM), AssertionError, "no unseeded randomness"),
        # used to raise json's TypeError from inside snapshot()
        (lambda seed: NumpyExtraState(seed=seed, similarity=SIM), Exception, "_extra_state must return a dict of JSON"),
        # used to raise "can't concat str to bytes"
        (lambda seed: TextModel(seed=seed, similarity=SIM), Exception, "_model_bytes returned a str, not bytes"),
        # used to fail with AttributeError: 'NoneType' object has no attribute 'choose'
        (lambda seed: None, TypeError, "returned a NoneType, not a Router"),
    ],
)
def test_a_broken_router_or_factory_is_named(factory: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_router(factory)


def test_the_snapshot_hook_errors_are_router_errors() -> None:
    from memabra import RouterError

    for cls in (NumpyExtraState, TextModel):
        with pytest.raises(RouterError, match=cls.__name__):
            cls(similarity=SIM).snapshot()


def test_a_factory_returning_one_router_is_named() -> None:
    shared = TemperatureRouter(similarity=SIM)
    with pytest.raises(AssertionError, match="returned the same router twice"):
        check_router(lambda seed: shared)


def test_a_router_class_is_checked_as_built_by_the_bench() -> None:
    # used to call PopularityRouter(7): "takes 1 positional argument but 2 were given"; a class whose
    # first argument is positional (temperature) was checked with temperature=7
    check_router(PopularityRouter)


def test_a_router_instance_is_cloned_with_each_seed() -> None:
    # used to fail with "'PopularityRouter' object is not callable"
    check_router(TemperatureRouter(0.5, similarity=SIM))


def test_something_that_builds_no_router_is_named() -> None:
    with pytest.raises(TypeError, match="not a memabra.router.Router"):
        check_router(dict)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lambda seed: MyRouter"):
        check_router("popularity")  # type: ignore[arg-type]


def test_a_built_in_router_keeps_its_own_name() -> None:
    check_router(lambda seed: LinearRouter(seed=seed, similarity=SIM))
