"""The policies page groups decisions by snapshot and shows each OPE run's support verdict."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.testclient import TestClient

from memabra._admin._policy import group_by_snapshot, snapshot_group
from memabra._records import OPEResult
from memabra.storage import EpisodeLog
from memabra.storage._admin_queries import KindShare, PolicyVersionStats, RewardPoint

from .conftest import Seeded


def test_versions_fold_into_the_snapshot_they_grew_from() -> None:
    snapshots = {"vw-abc", "vw-abc+500"}
    assert snapshot_group("vw-abc+17", snapshots) == "vw-abc"
    assert snapshot_group("vw-abc+500+3", snapshots) == "vw-abc+500"
    assert snapshot_group("vw-abc+5000", snapshots) == "vw-abc"
    assert snapshot_group("hybrid-1f2e", snapshots) == "hybrid-1f2e"
    assert snapshot_group("linear-9+4", snapshots) == "linear-9"


def test_a_hundred_thousand_updates_make_one_row_and_one_series() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    versions = [f"vw-abc+{i}" for i in range(1, 100_001)]
    points = [RewardPoint(v, "2026-01-01", 1, 1, 0.5) for v in versions]
    stats = [PolicyVersionStats(v, 1, 1, 2, 1, 1, 0.1, 0.5, 0.2, at, at) for v in versions]
    shares = [KindShare(v, "memory", 1, 1.0) for v in versions]
    points, stats, shares = group_by_snapshot(points, stats, shares, {"vw-abc"})
    assert [(p.policy_version, p.episodes, p.mean_reward) for p in points] == [("vw-abc", 100_000, 0.5)]
    assert [(s.policy_version, s.decisions, s.draws, s.exploration_rate) for s in stats] == [
        ("vw-abc", 100_000, 200_000, 0.5)
    ]
    assert [(s.policy_version, s.kind, s.share) for s in shares] == [("vw-abc", "memory", 1.0)]


def test_an_unsupported_estimate_shows_its_reason(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    reason = "64% of the target's probability falls where the logger put only its floor (more than 20%)"
    log.record_ope_results(
        [
            OPEResult(
                "random", "cdr", 0.1, 0.0, 0.2, 100, details={"supported": False, "reason": reason, "recommended": True}
            ),
            OPEResult(
                "hybrid", "cdr", 0.8, 0.7, 0.9, 100, details={"supported": True, "reason": "", "recommended": True}
            ),
        ]
    )
    page = client.get("/policies").text
    section = page.split('id="ope"', 1)[1].split("</section>", 1)[0]
    assert "unsupported" in section and "only its floor" in section
    assert "supported</span>" in section and "recommended" in section


def test_a_non_recommended_row_shows_its_own_estimators_verdict(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    own = "effective sample size 3.0 is below 20"
    target = {"supported": True, "reason": ""}
    log.record_ope_results(
        [
            OPEResult("hybrid", "cdr", 0.8, 0.7, 0.9, 100, details={**target, "recommended": True}),
            OPEResult(
                "hybrid",
                "pi",
                4.2,
                -9.0,
                18.0,
                100,
                details={**target, "recommended": False, "estimator_supported": False, "estimator_reason": own},
            ),
        ]
    )
    section = client.get("/policies").text.split('id="ope"', 1)[1].split("</section>", 1)[0]
    pi_row = next(row for row in section.split("<tr") if ">pi<" in row or ">pi " in row)
    assert "unsupported" in pi_row and own in pi_row  # not the target's "supported"
