"""Target policies named on the command line: a saved snapshot, a router configuration or a baseline.

Accepted specs:

* ``snapshot:VERSION`` (or just ``VERSION`` when a snapshot of that version is in the log);
  ``snapshot:VERSION:module:Class`` for a snapshot of a router of your own, restored from its class;
* ``active`` / ``active:POLICY``: the snapshot currently promoted (``active`` alone only where one
  policy has one); ``active:module:Class`` for a router of your own;
* a router name — ``vw``, ``linear``, ``hybrid``, ``bm25``, ``embedding``, ``random`` — optionally with
  constructor arguments as JSON: ``vw:{"epsilon": 0.05}``;
* a router of your own by import path: ``module:Class`` (optionally ``module:Class:{"temperature":
  0.5}``) or ``module:function`` (a factory taking a seed), as ``memabra bench --routers`` takes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memabra._errors import ConfigError, MemabraError, RouterError, SnapshotError, UnknownEpisodeError
from memabra._records import PolicySnapshot
from memabra.evals._router_paths import built_router, is_router_path, router_target
from memabra.router import EmbeddingRouter, HybridRouter, LexicalRouter, LinearRouter, RandomRouter, Router, VWRouter
from memabra.storage import AdminQueries, EpisodeLog

__all__ = ["ROUTERS", "ResolvedPolicy", "resolve_policy", "router_from_snapshot"]

ROUTERS: dict[str, type[Router]] = {
    cls.name: cls for cls in (VWRouter, LinearRouter, HybridRouter, LexicalRouter, EmbeddingRouter, RandomRouter)
}
# The bench's old name for LinearRouter, still accepted wherever a router is named.
ROUTER_ALIASES: dict[str, str] = {"sklearn": "linear"}


@dataclass(frozen=True, slots=True)
class ResolvedPolicy:
    spec: str
    router: Router
    snapshot_version: str | None


def router_from_snapshot(snapshot: PolicySnapshot, classes: Sequence[type[Router]] = ()) -> Router:
    """The router ``snapshot`` holds; ``classes`` are routers of your own, found by their ``name``
    before the built-in ones."""
    cls = {c.name: c for c in classes}.get(snapshot.policy) or ROUTERS.get(snapshot.policy)
    if cls is None:
        raise ConfigError(
            f"snapshot {snapshot.version} is of policy {snapshot.policy!r}, which this memabra cannot restore "
            f"by itself: a router of your own restores from its class, named as snapshot:{snapshot.version}:"
            "module:Class (active:module:Class for the active snapshot)"
        )
    try:
        return cls.restore(snapshot)
    except SnapshotError as exc:
        # restore raises SnapshotError from the constructor's TypeError or RouterError when the
        # stored arguments are at fault, and on its own when the model bytes are
        if isinstance(exc.__cause__, TypeError | RouterError):
            raise ConfigError(f"snapshot {snapshot.version} no longer loads (learner_args): {exc.__cause__}") from None
        raise ConfigError(f"snapshot {snapshot.version} no longer loads (model): {exc}") from None
    except MemabraError:
        raise
    except Exception as exc:  # a router of your own whose constructor or model loading fails
        raise ConfigError(
            f"snapshot {snapshot.version} no longer loads ({cls.__module__}:{cls.__qualname__}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def resolve_policy(spec: str, log: EpisodeLog) -> ResolvedPolicy:
    if not spec or not isinstance(spec, str):
        raise ConfigError(
            "--policy is empty: name a snapshot (snapshot:VERSION), 'active', or a router (vw, hybrid, ...)"
        )
    head, _, rest = spec.partition(":")
    head = ROUTER_ALIASES.get(head, head)
    if head == "snapshot":
        version, classes = _own_class_after(spec, rest)
        snap = _snapshot(log, version)
        return ResolvedPolicy(spec, router_from_snapshot(snap, classes), snap.version)
    if head == "active":
        policy, classes = (rest or None), ()
        if rest and is_router_path(rest):
            classes = (_router_class(spec, rest),)
            policy = classes[0].name
        elif not rest:
            _require_one_active_policy(log)
        active = log.latest_snapshot(policy, status="active")
        if active is None:
            raise ConfigError(f"no active snapshot{' of ' + policy if policy else ''} in the log; promote one first")
        return ResolvedPolicy(spec, router_from_snapshot(active, classes), active.version)
    attr, _, own_args = rest.partition(":")
    if head not in ROUTERS and is_router_path(f"{head}:{attr}"):
        return ResolvedPolicy(spec, _own_router(spec, f"{head}:{attr}", own_args), None)
    if head in ROUTERS:
        kwargs = _arguments(spec, rest)
        try:
            router = ROUTERS[head](**kwargs)
            # a router checks its arguments when it first builds its state; build it now, so a bad
            # value fails here and not after a full pass over the log
            _ = router.policy_version
        except (TypeError, RouterError) as exc:
            raise ConfigError(f"bad arguments for router {head!r}: {exc}") from None
        return ResolvedPolicy(spec, router, None)
    try:
        snap = log.get_snapshot(spec)
    except UnknownEpisodeError:
        raise ConfigError(
            f"unknown policy {spec!r}: use snapshot:VERSION, active, one of {', '.join(sorted(ROUTERS))}"
            " or a router of your own as module:Class"
        ) from None
    return ResolvedPolicy(spec, router_from_snapshot(snap), snap.version)


def _own_class_after(spec: str, rest: str) -> tuple[str, tuple[type[Router], ...]]:
    """``VERSION`` and no class, or for ``VERSION:module:Class`` the version and that class (read
    from the right: a version may hold a colon)."""
    version, _, path = rest.rpartition(":")
    version, _, module = version.rpartition(":")
    if not version or not is_router_path(f"{module}:{path}"):
        return rest, ()
    return version, (_router_class(spec, f"{module}:{path}"),)


def _router_class(spec: str, path: str) -> type[Router]:
    target = router_target(path)
    if not (isinstance(target, type) and issubclass(target, Router)):
        raise ConfigError(
            f"--policy {spec!r}: a snapshot restores from its router's class; name a memabra.router.Router "
            "subclass (module:Class), not a factory function"
        )
    return target


def _require_one_active_policy(log: EpisodeLog) -> None:
    """``active`` alone names the one policy's active snapshot: where several agents serve policies
    of their own it would evaluate whichever was saved last."""
    active = AdminQueries(log).active_policies()
    if len(active) > 1:
        raise ConfigError(
            f"--policy active: the log has an active snapshot of each of {len(active)} policies "
            f"({', '.join(active)}); name one: active:POLICY for a built-in router, active:module:Class "
            "for a router of your own"
        )


def _arguments(spec: str, raw: str) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        kwargs = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"router arguments in {spec!r} are not JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise ConfigError(f"router arguments in {spec!r} must be a JSON object")
    return kwargs


def _own_router(spec: str, path: str, raw_args: str) -> Router:
    """The router of your own ``path`` names: its class with the JSON arguments, or what its
    factory builds for seed 0."""
    target = router_target(path)
    kwargs = _arguments(spec, raw_args)
    try:
        router: Router
        if isinstance(target, type) and issubclass(target, Router):
            router = target(**kwargs)
        elif kwargs:
            raise ConfigError(f"router {path!r} is a factory: it takes a seed, not arguments ({spec!r})")
        else:
            router = built_router(path, target, 0)
        _ = router.policy_version  # as for a built-in: bad arguments fail here, not after a pass over the log
    except (TypeError, RouterError) as exc:
        raise ConfigError(f"bad arguments for router {path!r}: {exc}") from None
    except MemabraError:
        raise
    except Exception as exc:  # the user's own code (a model file, a service it connects to): named, not a traceback
        raise ConfigError(f"router {spec!r} failed to build: {type(exc).__name__}: {exc}") from exc
    return router


def _snapshot(log: EpisodeLog, version: str) -> PolicySnapshot:
    try:
        return log.get_snapshot(version)
    except UnknownEpisodeError:
        raise ConfigError(f"no snapshot with version {version!r} in the log") from None
