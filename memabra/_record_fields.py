"""Records as plain JSON fields, where storage and the exported documents must agree on one shape.

Kept apart from :mod:`memabra._episode_document`, which reads the log's failure rules and body
digests: storage writes these fields too, and importing the document module from storage made a
cycle that broke whichever of the two a process imported first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memabra._records import CandidateKind, SlotDraw

__all__ = ["slot_fields", "slot_from_fields"]


def slot_fields(d: SlotDraw) -> dict[str, Any]:
    """One slot's draw, whole: its distribution and what was drawn (the ``memabra.decision/1``
    export, the episode document and a paused turn's document)."""
    return {
        "slot": d.slot,
        "kind": d.kind.value,
        "candidate_ids": list(d.candidate_ids),
        "probabilities": list(d.probabilities),
        "chosen_id": d.chosen_id,
        "chosen_probability": d.chosen_probability,
    }


def slot_from_fields(fields: Mapping[str, Any]) -> SlotDraw:
    """The draw :func:`slot_fields` wrote (a document read back)."""
    return SlotDraw(
        fields["slot"],
        CandidateKind(fields["kind"]),
        tuple(fields["candidate_ids"]),
        tuple(fields["probabilities"]),
        fields["chosen_id"],
        fields["chosen_probability"],
    )
