"""Router names the bench understands, each mapped to a factory taking a seed; a router of your own
by import path (``module:Class`` for a :class:`~memabra.router.Router` subclass, ``module:function``
for a factory taking a seed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memabra._errors import ConfigError
from memabra.evals._router_paths import built_router, router_target
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
    """Factories for ``names`` sharing one similarity (so the embedding cache is shared). A name
    with a colon is an import path: ``module:Class`` (built as ``Class(seed=seed, similarity=...)``)
    or ``module:function`` (called as ``function(seed)``); the current directory is searched too."""
    names = [ROUTER_ALIASES.get(n, n) for n in names]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"router(s) named more than once: {', '.join(twice)} (sklearn is another name for linear); "
            "each router is one row of the report"
        )
    unknown = [n for n in names if n not in _BUILDERS and ":" not in n]
    if unknown:
        raise ConfigError(
            f"unknown router(s) {', '.join(unknown)}; choose from {', '.join(ROUTER_NAMES)}, or name a router "
            "of your own as module:Class (a memabra.router.Router subclass) or module:function (a factory taking a seed)"
        )
    sim = similarity if similarity is not None else Similarity.default()
    builders = {name: _BUILDERS[name] if name in _BUILDERS else _custom(name, sim) for name in names}
    return {name: _factory(build, sim) for name, build in builders.items()}


def _factory(build: Callable[[int, Similarity], Router], sim: Similarity) -> RouterFactory:
    return lambda seed: build(seed, sim)


def _custom(spec: str, sim: Similarity) -> Callable[[int, Similarity], Router]:
    """The builder of ``module:attr``, checked by building one router now (a bad path or a class
    that takes no ``seed`` fails before the bench starts, not after a router's whole run)."""
    target = router_target(spec)
    build: Callable[[int, Similarity], Router]
    if isinstance(target, type) and issubclass(target, Router):
        cls: type[Router] = target

        def build(seed: int, similarity: Similarity) -> Router:
            return cls(seed=seed, similarity=similarity)

    else:
        function = target

        def build(seed: int, similarity: Similarity) -> Router:
            return built_router(spec, function, seed)

    try:
        build(0, sim)
    except TypeError as exc:
        how = (
            f"the bench builds a class as {target.__name__}(seed=..., similarity=...); take **kwargs and pass "
            "them on to Router.__init__, or name a factory taking a seed as module:function"
            if isinstance(target, type)
            else "the bench calls a factory with the seed alone"
        )
        raise ConfigError(f"router {spec!r} cannot be built: {exc}; {how}") from None
    return build
