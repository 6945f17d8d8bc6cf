"""Target policies named on the command line: a saved snapshot, a router configuration or a baseline.

Accepted specs:

* ``snapshot:VERSION`` (or just ``VERSION`` when a snapshot of that version is in the log);
* ``active`` / ``active:POLICY``: the snapshot currently promoted;
* a router name — ``vw``, ``linear``, ``hybrid``, ``bm25``, ``embedding``, ``random`` — optionally with
  constructor arguments as JSON: ``vw:{"epsilon": 0.05}``;
* a router of your own by import path: ``module:Class`` (optionally ``module:Class:{"temperature":
  0.5}``) or ``module:function`` (a factory taking a seed), as ``memabra bench --routers`` takes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memabra._errors import ConfigError, RouterError, SnapshotError, UnknownEpisodeError
from memabra._records import PolicySnapshot
from memabra.evals._router_paths import built_router, is_router_path, router_target
from memabra.router import EmbeddingRouter, HybridRouter, LexicalRouter, LinearRouter, RandomRouter, Router, VWRouter
from memabra.storage import EpisodeLog

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


def router_from_snapshot(snapshot: PolicySnapshot) -> Router:
    cls = ROUTERS.get(snapshot.policy)
    if cls is None:
        raise ConfigError(
            f"snapshot {snapshot.version} is of policy {snapshot.policy!r}, which this memabra cannot restore"
        )
    try:
        return cls.restore(snapshot)
    except SnapshotError as exc:
        # restore raises SnapshotError from the constructor's TypeError or RouterError when the
        # stored arguments are at fault, and on its own when the model bytes are
        if isinstance(exc.__cause__, TypeError | RouterError):
            raise ConfigError(f"snapshot {snapshot.version} no longer loads (learner_args): {exc.__cause__}") from None
        raise ConfigError(f"snapshot {snapshot.version} no longer loads (model): {exc}") from None


def resolve_policy(spec: str, log: EpisodeLog) -> ResolvedPolicy:
    if not spec or not isinstance(spec, str):
        raise ConfigError(
            "--policy is empty: name a snapshot (snapshot:VERSION), 'active', or a router (vw, hybrid, ...)"
        )
    head, _, rest = spec.partition(":")
    head = ROUTER_ALIASES.get(head, head)
    if head == "snapshot":
        snap = _snapshot(log, rest)
        return ResolvedPolicy(spec, router_from_snapshot(snap), snap.version)
    if head == "active":
        active = log.latest_snapshot(rest or None, status="active")
        if active is None:
            raise ConfigError(f"no active snapshot{' of ' + rest if rest else ''} in the log; promote one first")
        return ResolvedPolicy(spec, router_from_snapshot(active), active.version)
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
    return router


def _snapshot(log: EpisodeLog, version: str) -> PolicySnapshot:
    try:
        return log.get_snapshot(version)
    except UnknownEpisodeError:
        raise ConfigError(f"no snapshot with version {version!r} in the log") from None
