"""A learner snapshot records the encoder whose cosines it learned, and serving it under another
encoder is warned of (the raw cosine feature reads another model's scale); it still loads and
routes. Snapshots without the record (older ones) load silently."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from memabra import PolicySnapshot
from memabra.router import CachingEncoder, LinearRouter, Similarity, load_router
from memabra.router._snapshot_codec import decode_envelope, encode_envelope


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.ones((len(texts), 4), dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _serving(name: str) -> Similarity:
    return Similarity(encoder=CachingEncoder(_Named(name)))


def _recorded(snapshot: PolicySnapshot) -> object:
    header, _ = decode_envelope(snapshot.model, snapshot.policy)
    return header.get("encoder", "<absent>")


def test_a_snapshot_records_its_encoder_and_serving_it_under_another_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    snap = LinearRouter(similarity=_serving("model-a-1")).snapshot()
    assert _recorded(snap) == "model-a-1"
    with caplog.at_level(logging.WARNING, logger="memabra"):
        same = LinearRouter.restore(snap, similarity=_serving("model-a-1"))
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="memabra"):
        other = load_router(snap, similarity=_serving("model-b-1"))
        load_router(snap, similarity=_serving("model-b-1"))  # a reload: said once per process
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "'model-a-1'" in warnings[0] and "'model-b-1'" in warnings[0] and snap.version in warnings[0]
    # it serves all the same, as the snapshot it is
    assert other.policy_version == same.policy_version == snap.version


def test_the_learner_passes_on_the_encoder_its_start_recorded(caplog: pytest.LogCaptureFixture) -> None:
    served = LinearRouter(similarity=_serving("model-a-2")).snapshot()
    with caplog.at_level(logging.WARNING, logger="memabra"):
        # the learner restores lexically (it learns logged features): no encoder of its own to differ
        learner = LinearRouter.restore(served, similarity=Similarity())
    assert caplog.records == []
    assert _recorded(learner.snapshot()) == "model-a-2"
    assert _recorded(learner.snapshot()) == "model-a-2"
    assert _recorded(learner.replica(similarity=Similarity()).snapshot()) == "model-a-2"
    # a router scoring with its own encoder records that one
    assert _recorded(learner.replica(similarity=_serving("model-c-2")).snapshot()) == "model-c-2"


def test_a_snapshot_without_the_record_loads_silently(caplog: pytest.LogCaptureFixture) -> None:
    snap = LinearRouter(similarity=_serving("model-a-3")).snapshot()
    header, payload = decode_envelope(snap.model, snap.policy)
    del header["encoder"], header["policy"]
    older = PolicySnapshot(
        policy=snap.policy,
        version=snap.version,
        model=encode_envelope(snap.policy, header, payload),
        learner_args=snap.learner_args,
        parent=snap.parent,
    )
    with caplog.at_level(logging.WARNING, logger="memabra"):
        restored = LinearRouter.restore(older, similarity=_serving("model-b-3"))
    assert caplog.records == []
    assert restored.policy_version == snap.version
    # a lexical router with no record names none
    assert _recorded(LinearRouter(similarity=Similarity()).snapshot()) == "<absent>"
