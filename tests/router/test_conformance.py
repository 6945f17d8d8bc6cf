"""Every router implementation passes the shared conformance suite."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memabra.router import (
    EmbeddingRouter,
    FixedListRouter,
    HybridRouter,
    LexicalRouter,
    LinearRouter,
    RandomRouter,
    Router,
    Similarity,
    SnapshotWatcher,
    VWRouter,
    check_router,
)

from .conftest import HashingEncoder

SIM = Similarity(encoder=HashingEncoder())

FACTORIES: dict[str, Callable[[int], Router]] = {
    "vw": lambda seed: VWRouter(seed=seed, similarity=SIM),
    "vw-floor": lambda seed: VWRouter(seed=seed, similarity=SIM, min_probability=0.01, exploration="epsilon", epsilon=0.1),
    "vw-squarecb": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="squarecb", gamma_scale=10.0),
    "vw-softmax": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="softmax"),
    "vw-native-epsilon": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="vw-epsilon", prior_examples=50),
    "vw-native-squarecb": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="vw-squarecb", prior_examples=50),
    "vw-native-regcbopt": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="vw-regcbopt", prior_examples=50),
    "vw-native-bag": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="vw-bag", prior_examples=50),
    "vw-native-cover": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="vw-cover", prior_examples=50),
    "linear": lambda seed: LinearRouter(seed=seed, similarity=SIM),
    "linear-ucb": lambda seed: LinearRouter(seed=seed, similarity=SIM, exploration="ucb", min_probability=0.001),
    "hybrid": lambda seed: HybridRouter(seed=seed, similarity=SIM),
    "bm25": lambda seed: LexicalRouter(seed=seed, similarity=SIM),
    "embedding": lambda seed: EmbeddingRouter(seed=seed, similarity=SIM),
    "random": lambda seed: RandomRouter(seed=seed, similarity=SIM),
    "fixed": lambda seed: FixedListRouter(["t-calc", "m-name"], seed=seed, similarity=SIM),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_router_conforms(name: str) -> None:
    check_router(FACTORIES[name])


def test_watcher_conforms_while_serving_its_initial_router() -> None:
    check_router(lambda seed: SnapshotWatcher(VWRouter(seed=seed, similarity=SIM), lambda: None, similarity=SIM))
