"""Routing records built from fields the router has already validated.

Every decision builds a record per offered candidate and one per slot drawn. Their public
constructors check what the slot loop guarantees by construction (a FeatureTable's read-only rows
hold finite numbers, checked when it was built; a slot's distribution was checked and floored by
:meth:`Router._distribution` and the draw never picks an option of probability 0), so the hot path
sets the frozen fields directly through their slot descriptors (``__setattr__`` refuses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memabra._records import Candidate, CandidateKind, ScoredCandidate, SlotDraw

__all__ = ["trusted_draw", "trusted_offers"]

_OFFER_SETTERS = tuple(ScoredCandidate.__dict__[name].__set__ for name in ("candidate", "features", "score", "rank"))
_DRAW_SETTERS = tuple(
    SlotDraw.__dict__[name].__set__
    for name in ("slot", "kind", "candidate_ids", "probabilities", "chosen_id", "chosen_probability")
)


def trusted_offers(
    candidates: Sequence[Candidate],
    features: Sequence[Mapping[str, float]],
    scores: Sequence[float],
    ranks: Sequence[int],
) -> tuple[ScoredCandidate, ...]:
    """The offer records of aligned candidates, feature rows (read-only: a FeatureTable's), finite
    scores and ranks."""
    new = object.__new__
    set_candidate, set_features, set_score, set_rank = _OFFER_SETTERS
    records = []
    for candidate, row, score, rank in zip(candidates, features, scores, ranks, strict=True):
        record = new(ScoredCandidate)
        set_candidate(record, candidate)
        set_features(record, row)
        set_score(record, score)
        set_rank(record, rank)
        records.append(record)
    return tuple(records)


def trusted_draw(
    slot: int, kind: CandidateKind, candidate_ids: tuple[str, ...], probabilities: tuple[float, ...], chosen: int
) -> SlotDraw:
    """The draw of option ``chosen`` from a checked distribution over ``candidate_ids``."""
    record = object.__new__(SlotDraw)
    set_slot, set_kind, set_ids, set_probabilities, set_chosen, set_chosen_probability = _DRAW_SETTERS
    set_slot(record, slot)
    set_kind(record, kind)
    set_ids(record, candidate_ids)
    set_probabilities(record, probabilities)
    set_chosen(record, candidate_ids[chosen])
    set_chosen_probability(record, probabilities[chosen])
    return record
