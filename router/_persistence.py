"""A router's state as a :class:`~memabra.PolicySnapshot`, a replica that skips the bytes, and the
router a snapshot restores: the bodies of :meth:`Router.snapshot`, :meth:`Router.replica` and
:meth:`Router.restore`, which reach into the router's private state as its own methods would.

A snapshot's model is the learner's bytes in a checksummed envelope whose header carries the
number of decisions made (so draws continue the seed sequence), the version, the learner's JSON
state beside the model (:meth:`Router._extra_state`), and the name of the encoder whose cosines
the model learned (``encoder``): the raw cosine feature means something else under another model,
so a snapshot served under another encoder is warned of (not refused: the learner still works).
A router that scores lexically only (the learner's) learns from the features logged by the
serving processes, so it records the encoder it is told those features were made with
(:func:`learns_features_of`: the standalone learner names the deployment's), else passes on the
name of the snapshot it started from; snapshots without the field (older ones, or a router told
of no encoder that started from none) load silently.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from typing import TYPE_CHECKING, Any, TypeVar

from memabra._errors import RouterError, SnapshotError
from memabra._records import PolicySnapshot
from memabra.router._similarity import Similarity
from memabra.router._snapshot_codec import decode_envelope, encode_envelope

if TYPE_CHECKING:
    from memabra.router._base import Router

__all__ = ["encoder_key", "learns_features_of", "replica_of", "restore_router", "snapshot_of"]

R = TypeVar("R", bound="Router")

_log = logging.getLogger("memabra")
# The header field naming the encoder; a router's own attribute keeps the one it was restored from.
_ENCODER = "encoder"
_FROM = "_encoder_from"
# (recorded, serving) pairs already warned of in this process: a learner committing every few
# rewards would otherwise repeat the warning with each reload
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def encoder_key(similarity: Similarity) -> str | None:
    """The name ``similarity``'s encoder stores vectors under (as :class:`CachingEncoder` names it),
    or ``None`` when it scores lexically only or its name cannot be had."""
    encoder = similarity.encoder
    if encoder is None:
        return None
    try:
        return str(getattr(encoder, "name", type(encoder).__name__))
    except Exception:  # noqa: BLE001 - a model folder that cannot be read: snapshots go on without the name
        _log.debug("the encoder's name could not be read for a snapshot", exc_info=True)
        return None


def learns_features_of(router: Router, encoder: str) -> None:
    """Record in ``router``'s snapshots that the features it learns from hold ``encoder``'s cosines
    (a router learning logged features, whose own similarity has no encoder; one scoring with an
    encoder of its own records that one instead)."""
    if not isinstance(encoder, str) or not encoder:
        raise RouterError(f"an encoder key is a non-empty string, got {encoder!r}")
    setattr(router, _FROM, encoder)


def _trained_under(router: Router, similarity: Similarity) -> str | None:
    """The encoder whose cosines ``router`` learned: its own when it scores with one, else the one
    its snapshot recorded."""
    own = encoder_key(similarity)
    return own if own is not None else getattr(router, _FROM, None)


def _warn_other_encoder(version: str, recorded: str, serving: str) -> None:
    with _warned_lock:
        if (recorded, serving) in _warned:
            return
        _warned.add((recorded, serving))
    _log.warning(
        "snapshot %s learned with the encoder %r and is served with %r: its weights on the raw cosine "
        "feature (sem) read another model's scale, so it routes with some of what it learned off until it "
        "learns on the new encoder's episodes (docs/configuration.md, 'Changing the embedding model')",
        version,
        recorded,
        serving,
    )


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
        similarity = router._similarity
    # outside the lock: a model folder's name is a digest of its files, read once per process
    encoder = _trained_under(router, similarity)
    with router._lock:
        version = router.policy_version
        header = {"decisions": router._decisions, "version": version, "state": _json_state(router)}
        if encoder is not None:
            header[_ENCODER] = encoder
        model = encode_envelope(router.name, header, _model_payload(router))
        parent = router._root_version if router._updates else router._parent
        return PolicySnapshot(
            policy=router.name, version=version, model=model, learner_args=router.get_params(), parent=parent
        )


def replica_of(router: R, *, similarity: Similarity | None, version: str | None, parent: str | None) -> R:
    with router._lock:
        router._ensure_state()
        own = router._similarity
    encoder = _trained_under(router, own)  # outside the lock, as in snapshot_of
    with router._lock:
        if version is None:
            version, parent = router.policy_version, router._root_version if router._updates else router._parent
        try:
            twin = type(router)(**router.get_params(), similarity=similarity)
        except TypeError as exc:
            raise TypeError(_rebuild_hint(type(router), exc)) from exc
        twin._ensure_state()
        setattr(twin, _FROM, encoder)
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
    recorded = header.get(_ENCODER)
    if isinstance(recorded, str):
        setattr(router, _FROM, recorded)
        serving = encoder_key(router._similarity)
        if serving is not None and serving != recorded:
            _warn_other_encoder(snapshot.version, recorded, serving)
    router._load_model(payload)
    router._restore_extra_state(state)
    router._decisions = decisions
    router._root_version = snapshot.version
    router._parent = snapshot.parent
    return router
