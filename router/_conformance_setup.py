"""What :func:`~memabra.router.check_router` checks before it runs a router: that it was given
something that builds routers (a factory, a :class:`Router` subclass or an instance), that the
factory builds a new router for each call and honours the seed, that the router's policy name is its
own, and that ``choose`` leaves the caller's candidate list as it was."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memabra._records import Candidate, RoutingContext
from memabra.router._base import Router
from memabra.router._similarity import Similarity
from memabra.router._watcher import router_classes

__all__ = ["RouterFactory", "check_factory", "check_input_list", "check_name", "router_factory"]

RouterFactory = Callable[[int], Router]

_FACTORY_HINT = "check_router takes a function of the seed that builds a new router: lambda seed: MyRouter(seed=seed)"


def router_factory(target: object) -> RouterFactory:
    """``target`` as a factory of routers checked on every call.

    A :class:`Router` subclass is built as ``cls(seed=seed, similarity=Similarity())`` (BM25 only,
    as ``memabra bench`` builds one), an instance is cloned from its ``get_params()`` with the seed
    replaced (as scikit-learn's ``check_estimator`` clones an estimator): without this a class passed
    as the factory took the seed as its first positional argument (a temperature, say) and passed.
    """
    if isinstance(target, type):
        if not issubclass(target, Router):
            raise TypeError(f"check_router got the class {target.__name__}, which is not a memabra.router.Router")
        cls = target
        return _checked(lambda seed: cls(seed=seed, similarity=Similarity()), cls.__name__)
    if isinstance(target, Router):
        template = target

        def clone(seed: int) -> Router:
            return type(template)(**{**template.get_params(), "seed": seed}, similarity=template.similarity)

        return _checked(clone, type(template).__name__)
    if not callable(target):
        raise TypeError(f"check_router got a {type(target).__name__}: {_FACTORY_HINT}")
    return _checked(target, getattr(target, "__name__", "the factory"))


def _checked(factory: Callable[[int], object], what: str) -> RouterFactory:
    def build(seed: int) -> Router:
        router = factory(seed)
        if not isinstance(router, Router):
            raise TypeError(f"{what}({seed}) returned a {type(router).__name__}, not a Router: {_FACTORY_HINT}")
        return router

    return build


def check_factory(factory: RouterFactory, context: RoutingContext, candidates: Sequence[Candidate]) -> None:
    """Each call builds a new router, and the seed reaches it: the suite's tests of learning and of
    determinism compare routers built apart, and a bench over several seeds compares their runs."""
    first, second = factory(7), factory(7)
    assert first is not second, (
        "the factory returned the same router twice: it must build a new one on each call "
        "(lambda seed: MyRouter(seed=seed), not lambda seed: router)"
    )
    seeds = {factory(seed).choose(context, candidates).seed for seed in (7, 8)}
    assert len(seeds) == 2, (
        "routers built with the seeds 7 and 8 drew their first decisions with the same seed: the factory "
        "must pass its seed on (lambda seed: MyRouter(seed=seed))"
    )


def check_name(router: Router) -> None:
    """The policy name is the class's own: every selection and snapshot is filed under it, and
    ``load_router``, ``memabra ope`` and the runtime's checkpoints find the class by it."""
    declared = getattr(type(router), "name", None)
    if not isinstance(declared, str):  # a wrapper (SnapshotWatcher) names the router it serves
        return
    cls = type(router).__name__
    assert declared and declared != Router.name, (
        f"{cls} has no policy name of its own ({declared!r}): set the class attribute name = '...'; "
        "selections and snapshots are filed under it"
    )
    built_in = router_classes().get(declared)
    assert built_in is None or built_in is type(router), (
        f"{cls}.name {declared!r} is the built-in {built_in.__name__ if built_in else ''}'s: choose another, or "
        "its selections mix with that policy's in the log and its snapshots restore into the other class"
    )


def check_input_list(router: Router, context: RoutingContext, candidates: Sequence[Candidate]) -> None:
    """``choose`` reads the caller's list and never reorders, trims or extends it (an agent reuses it)."""
    given = list(candidates)
    router.choose(context, given)
    assert given == list(candidates), (
        "choose changed the candidate list it was given: copy it (list(candidates)) before sorting or filtering"
    )
