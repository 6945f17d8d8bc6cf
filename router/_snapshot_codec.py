"""The byte envelope around a router's model in a :class:`~memabra.PolicySnapshot`.

Layout: ``MAGIC (8 bytes) | sha256 of the rest (32) | header length (4, big-endian) | JSON header |
model payload``. The checksum catches truncation and bit rot before a learner (Vowpal Wabbit in
particular, which loads a truncated model silently as an empty one) ever sees the bytes.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

from memabra._errors import SnapshotError

__all__ = ["decode_envelope", "encode_envelope"]

MAGIC = b"MEMABRA1"
_DIGEST = 32


def encode_envelope(policy: str, header: dict[str, Any], payload: bytes) -> bytes:
    head = json.dumps({"policy": policy, **header}, sort_keys=True).encode("utf-8")
    body = struct.pack(">I", len(head)) + head + payload
    return MAGIC + hashlib.sha256(body).digest() + body


def decode_envelope(blob: bytes, policy: str) -> tuple[dict[str, Any], bytes]:
    """The header and payload of ``blob``; :class:`SnapshotError` if it is not an intact envelope
    written for ``policy``."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SnapshotError(f"snapshot model must be bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < len(MAGIC) + _DIGEST + 4 or not blob.startswith(MAGIC):
        raise SnapshotError("snapshot model bytes are not a memabra router snapshot (bad magic or too short)")
    digest = blob[len(MAGIC) : len(MAGIC) + _DIGEST]
    body = blob[len(MAGIC) + _DIGEST :]
    if hashlib.sha256(body).digest() != digest:
        raise SnapshotError("snapshot model bytes are corrupted (checksum mismatch)")
    (head_len,) = struct.unpack(">I", body[:4])
    try:
        header = json.loads(body[4 : 4 + head_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"snapshot header is unreadable: {exc}") from None
    if not isinstance(header, dict) or header.get("policy") != policy:
        found = header.get("policy") if isinstance(header, dict) else None
        raise SnapshotError(f"snapshot model was written by policy {found!r}, not {policy!r}")
    return header, body[4 + head_len :]
