"""Usage counts and creation time travel as typed fields of the candidate, and logs written while
they were metadata strings still replay."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, update

from factories import uniform_selection
from memabra import Candidate, CandidateKind, CandidateStats, Episode, RoutingContext
from memabra._records import RegistryItem
from memabra.router import Similarity, featurize
from memabra.storage import EpisodeLog
from memabra.storage._models import DecisionCandidateRow

CREATED = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _logged(log: EpisodeLog, cands: list[Candidate]) -> Episode:
    sel = uniform_selection("u1", cands, [cands[0].id])
    ep = Episode(user_id="u1", query=sel.context.query, selections=(sel,), answer="ok")
    log.log_episode(ep)
    return ep


def test_typed_usage_round_trips_through_the_log(log: EpisodeLog) -> None:
    cands = [
        Candidate("m0", CandidateKind.MEMORY, "a", 3, {"source": "t"}, usage=CandidateStats(4, 1), created_at=CREATED),
        Candidate("m1", CandidateKind.MEMORY, "b", 3, {"source": "t"}),
    ]
    ep = _logged(log, cands)
    back = log.get_episode(ep.id).selections[0]
    assert [sc.candidate for sc in back.offered] == cands


def test_a_log_whose_metadata_carries_the_counts_replays_them(log: EpisodeLog) -> None:
    ep = _logged(log, [Candidate("m0", CandidateKind.MEMORY, "a", 3), Candidate("m1", CandidateKind.MEMORY, "b", 3)])
    legacy = {"source": "chat", "times_chosen": 5.0, "times_helped": 2, "created_at": "2025-03-01T12:00:00"}
    with log.engine.begin() as conn:
        conn.execute(
            update(DecisionCandidateRow).where(DecisionCandidateRow.candidate_id == "m0").values(metadata_=legacy)
        )
        stored = conn.execute(select(DecisionCandidateRow.metadata_).where(DecisionCandidateRow.candidate_id == "m0"))
        assert stored.scalar_one() == legacy
    replayed = log.get_episode(ep.id).selections[0].offered[0].candidate
    assert replayed.usage == CandidateStats(5, 2)
    assert replayed.created_at == CREATED  # a naive stored time is UTC
    assert dict(replayed.metadata) == {"source": "chat"}


def test_registry_items_featurise_as_before() -> None:
    item = RegistryItem(
        CandidateKind.MEMORY,
        "m0",
        "u1",
        "lives in Lisbon",
        4,
        created_at=CREATED,
        times_chosen=3,
        times_used=2,
        metadata={"times_chosen": 99},
    )
    cand = item.as_candidate()
    assert cand.usage == CandidateStats(3, 2) and cand.created_at == CREATED
    assert "times_chosen" not in cand.metadata
    row = featurize(RoutingContext("where", "u1"), [cand], similarity=Similarity()).rows[0]
    assert row["helped_rate"] == (2 + 1) / (3 + 2) and row["age_known"] == 1.0
