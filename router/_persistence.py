"""A router's state as a :class:`~memabra.PolicySnapshot`, a replica that skips the bytes, and the
router a snapshot restores: the bodies of :meth:`Router.snapshot`, :meth:`Router.replica` and
:meth:`Router.restore`, which reach into the router's private state as its own methods would.

A snapshot's model is the learner's bytes in a checksummed envelope whose header carries the
number of decisions made (so draws continue the seed sequence), the version, and the learner's JSON
state beside the model (:meth:`Router._extra_state`).
"""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any, TypeVar

from memabra._errors import RouterError, SnapshotError
from memabra._records import PolicySnapshot
from memabra.router._similarity import Similarity
from memabra.router._snapshot_codec import decode_envelope, encode_envelope

if TYPE_CHECKING:
    from memabra.router._base import Router

__all__ = ["replica_of", "restore_router", "snapshot_of"]

R = TypeVar("R", bound="Router")


def _model_payload(router: Router) -> bytes:
    payload = router._model_bytes()
    if isinstance(payload, (bytearray, memoryview)):
        return bytes(payload)
    if not isinstance(payload, bytes):
        raise RouterError(
            f"{type(router).__name__}._model_bytes returned a {type(payload).__name__}, not bytes: "
            "encode the model (json.dumps(model, sort_keys=True).encode())"
        )
    return payload


def _json_state(router: Router) -> dict[str, Any]:
    """``_extra_state()`` as a snapshot's header carries it (through JSON): a value JSON cannot hold
    is the hook's fault, named as such rather than as json's TypeError from deep in a snapshot."""
    state = router._extra_state()
    try:
        carried = json.loads(json.dumps(state, sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise RouterError(
            f"{type(router).__name__}._extra_state must return a dict of JSON values (str, int, float, bool, "
            f"None, lists and dicts of them; convert numpy numbers with float() or .tolist()): {exc}"
        ) from exc
    if not isinstance(carried, dict):
        raise RouterError(f"{type(router).__name__}._extra_state must return a dict, got {type(state).__name__}")
    return carried


def _rebuild_hint(cls: type[Router], exc: TypeError) -> str:
    """``exc`` with what a restore needs of a constructor, where that constructor cannot take ``similarity``."""
    params = inspect.signature(cls.__init__).parameters.values()
    if any(p.name == "similarity" or p.kind is p.VAR_KEYWORD for p in params):
        return str(exc)
    return (
        f"{exc}; a restore or replica rebuilds the router as {cls.__name__}(**get_params(), similarity=...), "
        "so its __init__ must take similarity and the other Router arguments as keywords (or **kwargs) and "
        "pass them on to Router.__init__"
    )


def snapshot_of(router: Router) -> PolicySnapshot:
    with router._lock:
        router._ensure_state()
        version = router.policy_version
        header = {"decisions": router._decisions, "version": version, "state": _json_state(router)}
        model = encode_envelope(router.name, header, _model_payload(router))
        parent = router._root_version if router._updates else router._parent
        return PolicySnapshot(
            policy=router.name, version=version, model=model, learner_args=router.get_params(), parent=parent
        )


def replica_of(router: R, *, similarity: Similarity | None, version: str | None, parent: str | None) -> R:
    with router._lock:
        router._ensure_state()
        if version is None:
            version, parent = router.policy_version, router._root_version if router._updates else router._parent
        try:
            twin = type(router)(**router.get_params(), similarity=similarity)
        except TypeError as exc:
            raise TypeError(_rebuild_hint(type(router), exc)) from exc
        twin._ensure_state()
        twin._copy_model_from(router)
        # through JSON, as a snapshot's header carries it: the twin reads what restore would read
        twin._restore_extra_state(_json_state(router))
        twin._decisions = router._decisions
        twin._root_version = version
        twin._parent = parent
    return twin


def restore_router(cls: type[R], snapshot: PolicySnapshot, similarity: Similarity | None) -> R:
    if not isinstance(snapshot, PolicySnapshot):
        raise SnapshotError(f"restore needs a PolicySnapshot, got {type(snapshot).__name__}")
    if snapshot.policy != cls.name:
        raise SnapshotError(f"snapshot {snapshot.version} is of policy {snapshot.policy!r}, not {cls.name!r}")
    header, payload = decode_envelope(snapshot.model, cls.name)
    try:
        router = cls(**dict(snapshot.learner_args), similarity=similarity)
        router._ensure_state()
    except TypeError as exc:
        raise SnapshotError(
            f"snapshot {snapshot.version} has unusable learner_args: {_rebuild_hint(cls, exc)}"
        ) from exc
    except RouterError as exc:
        raise SnapshotError(f"snapshot {snapshot.version} has unusable learner_args: {exc}") from exc
    decisions = header.get("decisions")
    if isinstance(decisions, bool) or not isinstance(decisions, int) or decisions < 0:
        raise SnapshotError(f"snapshot {snapshot.version} has a corrupted header (decisions={decisions!r})")
    state = header.get("state", {})
    if not isinstance(state, dict):
        raise SnapshotError(f"snapshot {snapshot.version} has a corrupted header (state={state!r})")
    router._load_model(payload)
    router._restore_extra_state(state)
    router._decisions = decisions
    router._root_version = snapshot.version
    router._parent = snapshot.parent
    return router
