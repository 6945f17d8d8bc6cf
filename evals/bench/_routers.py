"""Router names the bench understands, each mapped to a factory taking a seed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memabra._errors import ConfigError
from memabra.evals.bench._harness import RouterFactory
from memabra.router import (
    EmbeddingRouter,
    FixedListRouter,
    HybridRouter,
    LexicalRouter,
    LinearRouter,
    RandomRouter,
    Router,
    Similarity,
    VWRouter,
)

__all__ = ["ROUTER_ALIASES", "ROUTER_NAMES", "router_factories"]

_BUILDERS: dict[str, Callable[[int, Similarity], Router]] = {
    "vw": lambda seed, sim: VWRouter(seed=seed, similarity=sim),
    "linear": lambda seed, sim: LinearRouter(seed=seed, similarity=sim),
    "hybrid": lambda seed, sim: HybridRouter(seed=seed, similarity=sim),
    "bm25": lambda seed, sim: LexicalRouter(seed=seed, similarity=sim),
    "embedding": lambda seed, sim: EmbeddingRouter(seed=seed, similarity=sim),
    "random": lambda seed, sim: RandomRouter(seed=seed, similarity=sim),
    "fixed": lambda seed, sim: FixedListRouter(seed=seed, similarity=sim),
}

ROUTER_NAMES: tuple[str, ...] = tuple(_BUILDERS)
# Older names still accepted: the bench called the numpy LinearRouter "sklearn" before every
# command agreed on the router's own name, "linear".
ROUTER_ALIASES: dict[str, str] = {"sklearn": "linear"}


def router_factories(names: Sequence[str], similarity: Similarity | None = None) -> dict[str, RouterFactory]:
    """Factories for ``names`` sharing one similarity (so the embedding cache is shared)."""
    names = [ROUTER_ALIASES.get(n, n) for n in names]
    unknown = [n for n in names if n not in _BUILDERS]
    if unknown:
        raise ConfigError(f"unknown router(s) {', '.join(unknown)}; choose from {', '.join(ROUTER_NAMES)}")
    sim = similarity if similarity is not None else Similarity.default()
    return {name: _factory(_BUILDERS[name], sim) for name in names}


def _factory(build: Callable[[int, Similarity], Router], sim: Similarity) -> RouterFactory:
    return lambda seed: build(seed, sim)
