"""Routers of your own named by import path on the command line: ``module:Class`` (a
:class:`~memabra.router.Router` subclass) or ``module:function`` (a factory taking a seed). The
bench (``memabra bench --routers``) and offline evaluation (``memabra ope log --policy``) share
this, so a path that works in one works in the other."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from memabra._errors import ConfigError
from memabra.router import Router

__all__ = ["RouterTarget", "built_router", "is_router_path", "router_target"]

RouterTarget = type[Router] | Callable[[int], Router]


def is_router_path(spec: str) -> bool:
    """Whether ``spec`` reads as ``module:attr`` (the attribute a Python identifier)."""
    module_name, sep, attr = spec.partition(":")
    return bool(sep) and all(part.isidentifier() for part in module_name.split(".")) and attr.isidentifier()


def router_target(spec: str) -> RouterTarget:
    """The class or factory ``module:attr`` names; the current directory is searched too (as
    ``python -m`` would), only while importing."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"router {spec!r}: give an import path as module:Class or module:function")
    target = getattr(_import(module_name, spec), attr, None)
    if target is None:
        raise ConfigError(f"router {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if isinstance(target, type) and issubclass(target, Router):
        return target
    if callable(target) and not isinstance(target, type):
        return target  # type: ignore[no-any-return]
    raise ConfigError(f"router {spec!r} is not a memabra.router.Router subclass or a function taking a seed")


def built_router(spec: str, target: Callable[[int], object], seed: int) -> Router:
    """``target(seed)``, checked to be a router."""
    router = target(seed)
    if not isinstance(router, Router):
        raise ConfigError(f"router {spec!r} returned {type(router).__name__}, not a memabra.router.Router")
    return router


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
