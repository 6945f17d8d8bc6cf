"""A router's constructor arguments: read back from its attributes (the body of
:meth:`Router.get_params`, which a snapshot's ``learner_args`` rebuild the router from), and the
checks of the arguments every router shares (the body of :meth:`Router._check_params`)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from memabra._errors import RouterError

if TYPE_CHECKING:
    from memabra.router._base import Router

__all__ = ["check_shared_params", "constructor_params"]


def constructor_params(router: object, base: type) -> dict[str, Any]:
    """The arguments of ``router``'s ``__init__`` as JSON values (``similarity`` left out): where an
    ``__init__`` takes ``**kwargs`` the one it forwards them to (up to ``base``) is read too, so a
    subclass that passes ``seed`` or ``min_probability`` on that way keeps them in a snapshot. Each
    value is the attribute of the same name, as scikit-learn's ``get_params`` reads it."""
    params: dict[str, Any] = {}
    for klass in type(router).__mro__:
        if "__init__" not in klass.__dict__ or not issubclass(klass, base):
            continue
        signature = list(inspect.signature(klass.__dict__["__init__"]).parameters.values())
        for param in signature:
            if param.name in ("self", "similarity", *params) or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            if not hasattr(router, param.name):
                raise RouterError(
                    f"{type(router).__name__}.__init__ takes {param.name!r} but the router has no attribute "
                    f"{param.name!r}: store every constructor argument under its own name "
                    f"(self.{param.name} = {param.name}) so get_params() and snapshots can rebuild the router"
                )
            value = getattr(router, param.name)
            params[param.name] = list(value) if isinstance(value, tuple) else value
        if not any(param.kind is param.VAR_KEYWORD for param in signature):
            break
    return params


def check_shared_params(router: Router) -> None:
    """Raise :class:`~memabra.RouterError` naming the first of :class:`Router`'s own arguments that
    is out of range (on first use: ``__init__`` only stores them, as scikit-learn estimators do)."""
    if isinstance(router.seed, bool) or not isinstance(router.seed, int) or router.seed < 0:
        raise RouterError(f"seed must be a non-negative integer, got {router.seed!r}")
    if not isinstance(router.min_probability, (int, float)) or not 0.0 <= router.min_probability < 1.0:
        raise RouterError(f"min_probability must lie in [0, 1), got {router.min_probability!r}")
    if router.recall_limit is not None and (
        isinstance(router.recall_limit, bool) or not isinstance(router.recall_limit, int) or router.recall_limit < 1
    ):
        raise RouterError(f"recall_limit must be a positive integer or None, got {router.recall_limit!r}")
    if not isinstance(router.unused_penalty, (int, float)) or not 0.0 <= router.unused_penalty <= 1.0:
        raise RouterError(f"unused_penalty must lie in [0, 1], got {router.unused_penalty!r}")
    if isinstance(router.max_pending, bool) or not isinstance(router.max_pending, int) or router.max_pending < 1:
        raise RouterError(f"max_pending must be a positive integer, got {router.max_pending!r}")
