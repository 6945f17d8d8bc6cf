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
    "vw-greedy": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="greedy"),
    "vw-floor": lambda seed: VWRouter(seed=seed, similarity=SIM, min_probability=0.01, epsilon=0.2, top_m=2),
    "linear": lambda seed: LinearRouter(seed=seed, similarity=SIM),
    "linear-greedy": lambda seed: LinearRouter(seed=seed, similarity=SIM, exploration="greedy"),
    "linear-wide": lambda seed: LinearRouter(seed=seed, similarity=SIM, epsilon=0.5, top_m=8, min_probability=0.001),
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
