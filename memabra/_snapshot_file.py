"""A policy snapshot as a file, to move it between logs (``memabra policies export --whole`` /
``memabra policies import``): run production's policy in staging or in CI against an evaluation
set without writing to production's log, deploy a snapshot trained on another log, keep one aside.

The document (JSON, ``"format": "memabra.snapshot/1"``) holds the whole snapshot: ``policy``,
``version``, ``parent``, ``created_at``, ``learner_args``, ``metrics`` (its offline evaluations
among them) and ``model``, base64, with its ``model_sha256``, so a file cut short or edited by hand
is refused rather than served. An import stores it as a candidate, never active: making it serve is
a promote, reviewed and audited as any other.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from memabra._errors import InvalidRecordError, SnapshotError
from memabra._records import JSONValue, PolicySnapshot, utcnow
from memabra.router import Router, load_router

__all__ = ["SNAPSHOT_FORMAT", "imported_snapshot", "snapshot_document"]

SNAPSHOT_FORMAT = "memabra.snapshot/1"
# where an import notes what it changed: the parent (dropped where the target log lacks it) and when
IMPORTED_KEY = "imported"


def snapshot_document(snapshot: PolicySnapshot) -> dict[str, JSONValue]:
    """``snapshot`` as the JSON document :func:`imported_snapshot` reads back."""
    return {
        "format": SNAPSHOT_FORMAT,
        "policy": snapshot.policy,
        "version": snapshot.version,
        "parent": snapshot.parent,
        "created_at": snapshot.created_at.isoformat(),
        "learner_args": dict(snapshot.learner_args),
        "metrics": dict(snapshot.metrics),
        "model": base64.b64encode(snapshot.model).decode("ascii"),
        "model_sha256": hashlib.sha256(snapshot.model).hexdigest(),
    }


def imported_snapshot(
    text: str, *, source: str, parents: Iterable[str], classes: Iterable[type[Router]] = ()
) -> PolicySnapshot:
    """The snapshot the document ``text`` (read from ``source``, for messages) holds, as a
    candidate for a log holding the snapshots ``parents``: its parent is kept where that log holds
    it, else dropped and noted under the metrics' ``imported``. Checked whole before anything is
    stored: the format, every field's type, the model's checksum, and that the router restores from
    it (``classes``: routers of your own). :class:`~memabra.InvalidRecordError` or
    :class:`~memabra.SnapshotError` names what is wrong."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRecordError(f"{source} is not a snapshot document (not JSON: {exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InvalidRecordError(
            f"{source} is not a snapshot document: format {found!r}, expected {SNAPSHOT_FORMAT!r} "
            "(written by memabra policies export --whole)"
        )
    policy, version = _text(doc, "policy", source), _text(doc, "version", source)
    parent = doc.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise InvalidRecordError(f"{source}: parent must be a version or null, got {parent!r}")
    model = _model(doc, source)
    try:
        created_at = datetime.fromisoformat(_text(doc, "created_at", source))
    except ValueError:
        raise InvalidRecordError(f"{source}: created_at {doc['created_at']!r} is not an ISO 8601 time") from None
    if created_at.tzinfo is None:
        raise InvalidRecordError(f"{source}: created_at {doc['created_at']!r} has no time zone")
    learner_args, metrics = _mapping(doc, "learner_args", source), _mapping(doc, "metrics", source)
    kept_parent = parent if parent in set(parents) else None
    note: dict[str, JSONValue] = {"at": utcnow().isoformat(timespec="seconds"), "parent": parent}
    snapshot = PolicySnapshot(
        policy,
        version,
        model,
        learner_args=learner_args,
        parent=kept_parent,
        created_at=created_at,
        metrics={**metrics, IMPORTED_KEY: note},
        status="candidate",
    )
    try:
        load_router(snapshot, classes=classes)
    except SnapshotError as exc:
        raise SnapshotError(f"{source}: the snapshot does not restore: {exc}") from None
    return snapshot


def _text(doc: Mapping[str, Any], key: str, source: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidRecordError(f"{source}: {key} must be a non-empty string, got {value!r}")
    return value


def _mapping(doc: Mapping[str, Any], key: str, source: str) -> dict[str, JSONValue]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise InvalidRecordError(f"{source}: {key} must be a JSON object, got {type(value).__name__}")
    return value


def _model(doc: Mapping[str, Any], source: str) -> bytes:
    encoded, expected = doc.get("model"), doc.get("model_sha256")
    if not isinstance(encoded, str) or not isinstance(expected, str):
        raise InvalidRecordError(f"{source}: model and model_sha256 must be strings (base64, hex)")
    try:
        model = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise InvalidRecordError(f"{source}: model is not valid base64") from None
    if hashlib.sha256(model).hexdigest() != expected:
        raise InvalidRecordError(
            f"{source}: the model's checksum does not match model_sha256 (the file was cut short or edited)"
        )
    return model
