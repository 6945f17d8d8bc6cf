"""A router's constructor arguments, read back from its attributes: the body of
:meth:`Router.get_params`, which a snapshot's ``learner_args`` rebuild the router from."""

from __future__ import annotations

import inspect
from typing import Any

from memabra._errors import RouterError

__all__ = ["constructor_params"]


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
