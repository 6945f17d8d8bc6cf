"""Router names the bench understands, each mapped to a factory taking a seed; a router of your own
by import path (``module:Class`` for a :class:`~memabra.router.Router` subclass, ``module:function``
for a factory taking a seed)."""

from __future__ import annotations

import importlib
import os
import sys
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
    """Factories for ``names`` sharing one similarity (so the embedding cache is shared). A name
    with a colon is an import path: ``module:Class`` (built as ``Class(seed=seed, similarity=...)``)
    or ``module:function`` (called as ``function(seed)``); the current directory is searched too."""
    names = [ROUTER_ALIASES.get(n, n) for n in names]
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
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"router {spec!r}: give an import path as module:Class or module:function")
    target = getattr(_import(module_name, spec), attr, None)
    if target is None:
        raise ConfigError(f"router {spec!r}: module {module_name!r} has no attribute {attr!r}")
    build: Callable[[int, Similarity], Router]
    if isinstance(target, type) and issubclass(target, Router):
        cls = target

        def build(seed: int, similarity: Similarity) -> Router:
            return cls(seed=seed, similarity=similarity)

    elif callable(target) and not isinstance(target, type):
        function = target

        def build(seed: int, similarity: Similarity) -> Router:
            router = function(seed)
            if not isinstance(router, Router):
                raise ConfigError(f"router {spec!r} returned {type(router).__name__}, not a memabra.router.Router")
            return router

    else:
        raise ConfigError(f"router {spec!r} is not a memabra.router.Router subclass or a function taking a seed")
    try:
        build(0, sim)
    except TypeError as exc:
        raise ConfigError(f"router {spec!r} cannot be built from a seed: {exc}") from None
    return build


def _import(module_name: str, spec: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != module_name.split(".")[0] or here in sys.path:
            raise ConfigError(f"router {spec!r}: cannot import {module_name!r}: {exc}") from None
    # as `python -m` would: a console script does not put the current directory on the path
    sys.path.insert(0, here)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"router {spec!r}: cannot import {module_name!r} here or on the path: {exc}") from None
    finally:
        sys.path.remove(here)
