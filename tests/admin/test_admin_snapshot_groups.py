"""The policies page groups decisions by snapshot and shows each OPE run's support verdict."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from starlette.testclient import TestClient

from memabra import Episode
from memabra._admin._policy import group_by_snapshot, snapshot_group
from memabra._records import OPEResult
from memabra.storage import EpisodeLog, KindShare, PolicyVersionStats, RewardPoint

from .conftest import ClientFactory, Seeded


def test_versions_fold_into_the_snapshot_they_grew_from() -> None:
    snapshots = {"vw-abc", "vw-abc+500"}
    assert snapshot_group("vw-abc+17", snapshots) == "vw-abc"
    assert snapshot_group("vw-abc+500+3", snapshots) == "vw-abc+500"
    # the latest snapshot of the root at or below the version's update count: the model it grew from
    assert snapshot_group("vw-abc+5000", snapshots) == "vw-abc+500"
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
            OPEResult("hybrid", "cdr", 0.8, 0.7, 0.9, 100, details={**target, "recommended": True}, run_id="h"),
            OPEResult(
                "hybrid",
                "pi",
                4.2,
                -9.0,
                18.0,
                100,
                details={**target, "recommended": False, "estimator_supported": False, "estimator_reason": own},
                run_id="h",
            ),
        ]
    )
    section = client.get("/policies").text.split('id="ope"', 1)[1].split("</section>", 1)[0]
    pi_row = next(row for row in section.split("<tr") if ">pi<" in row or ">pi " in row)
    assert "unsupported" in pi_row and own in pi_row  # not the target's "supported"


def test_an_online_learners_versions_belong_to_the_snapshot_they_grew_from() -> None:
    # the online learner logs "<root>+<updates in the lineage>" and saves snapshots of the same form
    snapshots = {"linear-71c5+100", "linear-71c5+170", "linear-71c5+236"}
    assert snapshot_group("linear-71c5+150", snapshots) == "linear-71c5+100"
    assert snapshot_group("linear-71c5+170", snapshots) == "linear-71c5+170"
    assert snapshot_group("linear-71c5+204", snapshots) == "linear-71c5+170"
    assert snapshot_group("linear-71c5+900", snapshots) == "linear-71c5+236"
    assert snapshot_group("linear-71c5+88", snapshots) == "linear-71c5"  # before the first snapshot
    assert snapshot_group("linear-71c5", snapshots) == "linear-71c5"
    assert snapshot_group("linear-71c5+100+4", snapshots) == "linear-71c5+100"  # restored from +100
    assert snapshot_group("linear-99ff+150", snapshots) == "linear-99ff"  # another root shares nothing


def _online_log(log: EpisodeLog) -> None:
    """190 decisions of one online learner (versions root+0..root+189) and its snapshots at +100
    and +170, as the demo's log holds them."""
    from memabra import PolicySnapshot
    from memabra._feedback import RewardService

    from .conftest import NOW, pool, slate

    service = RewardService(log)
    episodes = []
    for n in range(190):
        version = "linear-71c5" if n == 0 else f"linear-71c5+{n}"
        at = NOW - timedelta(minutes=200 - n)
        sel = slate("ann", pool("ann", tools=False), ["mem-ann-0"], version=version, query=f"q{n}", created_at=at)
        episodes.append(Episode(user_id="ann", query=f"q{n}", selections=(sel,), created_at=at))
    log.log_episodes([service.scored(e) for e in episodes])
    log.save_snapshot(PolicySnapshot("linear", "linear-71c5+100", b"x", created_at=NOW - timedelta(minutes=100)))
    log.save_snapshot(
        PolicySnapshot(
            "linear",
            "linear-71c5+170",
            b"x",
            parent="linear-71c5+100",
            status="active",
            created_at=NOW - timedelta(minutes=30),
        )
    )


def test_the_policies_page_counts_an_online_learners_decisions_per_snapshot(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    _online_log(log)
    client = make_client()
    page = client.get("/policies?window=all").text
    snapshots = page.split('id="snapshots"', 1)[1].split("</section>", 1)[0]
    row = {
        version: re.search(rf'data-version="{re.escape(version)}">(.*?)</tr>', snapshots, re.S).group(1)  # type: ignore[union-attr]
        for version in ("linear-71c5+100", "linear-71c5+170")
    }
    cells = {v: re.findall(r'<td class="num">(?:<a[^>]*>)?([^<]*)(?:</a>)?</td>', r) for v, r in row.items()}
    assert cells["linear-71c5+100"][0] == "70" and cells["linear-71c5+170"][0] == "20"
    # the count links to the episodes it counts
    link = re.search(r'<a class="served" href="([^"]+)"', row["linear-71c5+100"]).group(1)  # type: ignore[union-attr]
    listed = client.get(html.unescape(link)).text
    assert "70 episodes match these filters" in listed
    assert "no policy snapshot with version" in client.get("/episodes?snapshot=linear-9").text
    versions = page.split('id="versions"', 1)[1].split("</section>", 1)[0]
    assert "latest saved snapshot of the same root whose update count is at most n" in versions
    decisions = dict(
        re.findall(
            r'<td class="mono">([^<]+?)(?: <span[^>]*>\(no snapshot\)</span>)?</td>\s*<td class="num">(\d+)', versions
        )
    )
    assert decisions == {"linear-71c5+170": "20", "linear-71c5+100": "70", "linear-71c5": "100"}


def test_the_episode_filter_suggests_the_versions_episodes_were_logged_with(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/episodes").text
    datalist = page.split('<datalist id="versions">', 1)[1].split("</datalist>", 1)[0]
    suggested = re.findall(r'<option value="([^"]+)">(\d+) recent episodes?</option>', datalist)
    assert dict(suggested) == {"test-v2": "13", "test-v1": "12"}
    # each suggestion finds what it says
    for version, count in suggested:
        listed = client.get(f"/episodes?policy_version={version}&limit=500").text
        assert listed.count('<td class="nowrap"><a href="/episodes/') == int(count)


def test_a_snapshots_episode_count_links_the_episodes_of_the_window_it_counts(
    client: TestClient, seeded: Seeded
) -> None:
    """test-v1 served episodes nine to four and a half days ago: a week's window counts some of them."""
    page = client.get("/policies?window=7").text
    snapshots = page.split('id="snapshots"', 1)[1].split("</section>", 1)[0]
    row = re.search(r'data-version="test-v1">(.*?)</tr>', snapshots, re.S).group(1)  # type: ignore[union-attr]
    link = re.search(r'<a class="served" href="([^"]+)"[^>]*>(\d+)</a>', row)
    assert link is not None
    counted = int(link.group(2))
    assert 0 < counted < len(seeded.by_version["test-v1"])
    listed = client.get(html.unescape(link.group(1))).text
    assert f"{counted} episodes match these filters" in listed
