"""The admin aggregates against hand-counted values, on every configured backend."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta

import pytest

from memabra import STOP_ID, PolicySnapshot
from memabra._admin import ActiveSnapshotPolicy
from memabra._admin._views import chart_payload, choose_bucket, code_spans
from memabra._errors import SnapshotError
from memabra.storage import AdminQueries, EpisodeLog, RewardPoint

from .conftest import NOW, Seeded


@pytest.fixture
def log(shared_log: tuple[EpisodeLog, Seeded]) -> EpisodeLog:
    """This module only reads: every test shares one seeded log per backend."""
    return shared_log[0]


@pytest.fixture
def seeded(shared_log: tuple[EpisodeLog, Seeded]) -> Seeded:
    return shared_log[1]


def test_snapshots_without_model_bytes(log: EpisodeLog, seeded: Seeded) -> None:
    infos = AdminQueries(log).snapshots()
    assert [(s.version, s.parent, s.status, s.model_size) for s in infos] == [
        ("test-v3", "test-v2", "candidate", 1024),
        ("test-v2", "test-v1", "active", 4096),
        ("test-v1", None, "retired", 2048),
    ]
    assert AdminQueries(log).active_version() == "test-v2"
    assert AdminQueries(log).active_version("other") is None


def test_reward_over_time_matches_the_episodes(log: EpisodeLog, seeded: Seeded) -> None:
    queries = AdminQueries(log)
    rows = log.list_episodes(limit=100).items
    expected: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        expected[(r.policy_version, r.created_at.strftime("%Y-%m-%d"))].append(r.reward_total)  # type: ignore[arg-type]
    points = queries.reward_over_time()
    assert {(p.policy_version, p.bucket) for p in points} == set(expected)
    for p in points:
        values = expected[(p.policy_version, p.bucket)]
        assert p.episodes == p.rewarded == len(values)
        assert p.mean_reward == pytest.approx(sum(values) / len(values))
    assert [p.bucket for p in points] == sorted(p.bucket for p in points)
    hourly = queries.reward_over_time(bucket="hour", since=NOW - timedelta(days=2))
    assert all(len(p.bucket) == 13 for p in hourly)
    assert sum(p.episodes for p in hourly) == sum(1 for r in rows if r.created_at >= NOW - timedelta(days=2))
    by_minute = queries.reward_over_time(bucket="minute", since=NOW - timedelta(hours=2))
    expected_minutes = {
        (r.policy_version, r.created_at.strftime("%Y-%m-%d %H:%M"))
        for r in rows
        if r.created_at >= NOW - timedelta(hours=2)
    }
    assert {(p.policy_version, p.bucket) for p in by_minute} == expected_minutes
    by_second = queries.reward_over_time(bucket="second", since=NOW - timedelta(hours=2))
    assert {(p.policy_version, p.bucket) for p in by_second} == {
        (r.policy_version, r.created_at.strftime("%Y-%m-%d %H:%M:%S"))
        for r in rows
        if r.created_at >= NOW - timedelta(hours=2)
    }
    with pytest.raises(ValueError, match="bucket"):
        queries.reward_over_time(bucket="week")
    first, last = queries.time_span()
    assert first == min(r.created_at for r in rows) and last == max(r.created_at for r in rows)


def test_policy_version_stats(log: EpisodeLog, seeded: Seeded) -> None:
    stats = {s.policy_version: s for s in AdminQueries(log).policy_version_stats()}
    assert set(stats) == {"test-v1", "test-v2"}
    by_version: dict[str, list] = defaultdict(list)
    for episode_id in seeded.episodes:
        sel = log.get_episode(episode_id).selections[0]
        by_version[sel.policy_version].append(sel)
    for version, selections in by_version.items():
        st = stats[version]
        assert st.decisions == len(selections)
        assert st.draws == seeded.draws[version]
        assert st.explored_draws == seeded.explored_draws[version]
        assert st.exploration_rate == pytest.approx(seeded.explored_draws[version] / seeded.draws[version])
        assert st.stop_draws == sum(1 for s in selections for d in s.slots if d.chosen_id == STOP_ID)
        assert st.min_propensity == pytest.approx(min(s.propensity for s in selections))
        assert st.mean_propensity == pytest.approx(sum(s.propensity for s in selections) / len(selections))
        assert st.min_chosen_probability == pytest.approx(
            min(d.chosen_probability for s in selections for d in s.slots)
        )
        assert st.last_at == max(s.created_at for s in selections)
        assert st.sampled_decisions == st.decisions
    recent = AdminQueries(log).policy_version_stats(since=NOW - timedelta(hours=2))
    assert [(s.policy_version, s.decisions) for s in recent] == [("test-v2", 1)]


def test_draw_aggregates_read_only_the_latest_decisions(log: EpisodeLog, seeded: Seeded) -> None:
    latest = [log.get_episode(e).selections[0] for e in seeded.episodes[-4:]]
    stats = {s.policy_version: s for s in AdminQueries(log).policy_version_stats(sample=4)}
    assert stats["test-v1"].decisions == 12 and stats["test-v1"].sampled_decisions == stats["test-v1"].draws == 0
    v2 = stats["test-v2"]
    assert v2.decisions == 13 and v2.sampled_decisions == 4
    assert v2.draws == sum(len(s.slots) for s in latest)
    assert v2.stop_draws == sum(1 for s in latest for d in s.slots if d.chosen_id == STOP_ID)
    shares = AdminQueries(log).kind_shares(sample=4)
    assert sum(k.chosen for k in shares) == sum(len(s.chosen_ids) for s in latest)
    with pytest.raises(ValueError, match="sample"):
        AdminQueries(log).kind_shares(sample=0)


def test_kind_shares(log: EpisodeLog, seeded: Seeded) -> None:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for episode_id in seeded.episodes:
        sel = log.get_episode(episode_id).selections[0]
        for d in sel.slots:
            if d.chosen_id != STOP_ID:
                counts[sel.policy_version][d.kind.value] += 1
    shares = AdminQueries(log).kind_shares()
    assert {(s.policy_version, s.kind): s.chosen for s in shares} == {
        (v, k): n for v, c in counts.items() for k, n in c.items()
    }
    for version in counts:
        assert sum(s.share for s in shares if s.policy_version == version) == pytest.approx(1.0)


def test_conversation_and_summary(log: EpisodeLog, seeded: Seeded) -> None:
    queries = AdminQueries(log)
    turns = queries.conversation("bob", "thread-bob")
    assert [t.episode_id for t in turns] == seeded.by_user["bob"]
    assert [t.turn for t in turns] == sorted(t.turn for t in turns)
    assert queries.conversation("alice", "thread-bob") == []
    assert len(queries.conversation("bob", "thread-bob", limit=3)) == 3
    summary = queries.episode_summary(seeded.corrected)
    assert summary is not None and summary.corrected and summary.policy_version == "test-v1"
    assert queries.episode_summary("missing") is None


def _router_module():  # type: ignore[no-untyped-def]
    routers = pytest.importorskip("memabra.router")
    if not hasattr(routers, "LexicalRouter"):
        pytest.skip("memabra.router has no LexicalRouter yet")
    return routers


def test_active_snapshot_policy_shows_its_most_probable_slate_not_the_logged_draw(sqlite_log: EpisodeLog) -> None:
    from memabra import Budget, Candidate, CandidateKind, Episode, RoutingContext
    from memabra.router import FeatureTable

    log = sqlite_log
    routers = _router_module()
    # a high floor makes exploration common: the logged decision below drew an explored first pick
    router = routers.LexicalRouter(seed=3, min_probability=0.15, similarity=routers.Similarity())
    pool = [
        Candidate(f"m{i}", CandidateKind.MEMORY, text, 10)
        for i, text in enumerate(["tea", "green tea daily", "chess", "lyon"])
    ]
    context = RoutingContext(
        query="which tea?", user_id="u1", kinds=(CandidateKind.MEMORY,), budget=Budget(slots={CandidateKind.MEMORY: 2})
    )
    selection = next(
        s
        for s in (router.choose(context, pool, seed=seed) for seed in range(500))
        if s.slots[0].chosen_id != STOP_ID and s.slots[0].chosen_probability < max(s.slots[0].probabilities) - 1e-9
    )
    snapshot = router.snapshot()
    log.save_snapshot(
        PolicySnapshot(snapshot.policy, snapshot.version, snapshot.model, snapshot.learner_args, status="active")
    )
    log.log_episode(Episode(user_id="u1", query=context.query, selections=(selection,)))
    logged = log.get_episode(log.list_episodes().items[0].id).selections[0]
    now = ActiveSnapshotPolicy(log)(logged)
    first = logged.slots[0]
    mode = first.candidate_ids[max(range(len(first.probabilities)), key=first.probabilities.__getitem__)]
    assert now[0] == mode != logged.chosen_ids[0]  # the explored pick does not come back as "now"
    # and each later pick is the one the policy draws most often after the picks before it
    table = FeatureTable.from_rows(tuple(sc.candidate for sc in logged.offered), [sc.features for sc in logged.offered])
    draws = [
        router.choose(context, [sc.candidate for sc in logged.offered], features=table, seed=seed).chosen_ids
        for seed in range(2000)
    ]
    after_mode = Counter(ids[1] if len(ids) > 1 else STOP_ID for ids in draws if ids[:1] == now[:1])
    assert (now[1] if len(now) > 1 else STOP_ID) == after_mode.most_common(1)[0][0]
    assert ActiveSnapshotPolicy(log, "some-other-policy") is not None
    with pytest.raises(SnapshotError, match="no policy snapshot is active"):
        ActiveSnapshotPolicy(log, "some-other-policy")(selection)


def test_active_snapshot_policy_of_an_unknown_router(log: EpisodeLog, seeded: Seeded) -> None:
    _router_module()
    sel = log.get_episode(seeded.episodes[0]).selections[0]
    with pytest.raises(SnapshotError, match="policy 'test'"):
        ActiveSnapshotPolicy(log)(sel)


@pytest.mark.parametrize(
    ("span", "bucket"),
    [(timedelta(seconds=30), "second"), (timedelta(minutes=5), "minute"), (timedelta(hours=2, minutes=59), "minute")]
    + [(timedelta(hours=3), "hour")]
    + [(timedelta(days=2), "hour"), (timedelta(days=3), "day"), (timedelta(days=400), "day")],
)
def test_the_reward_chart_buckets_keep_a_series_to_a_few_hundred_points(span: timedelta, bucket: str) -> None:
    assert choose_bucket(NOW - span, NOW) == bucket
    assert choose_bucket(None, None) == "day"


def test_a_message_shows_its_commands_as_code_and_nothing_else_as_markup() -> None:
    assert code_spans("start `memabra learner --policy P`, or <b>an agent</b>") == (
        "start <code>memabra learner --policy P</code>, or &lt;b&gt;an agent&lt;/b&gt;"
    )
    assert code_spans("a ` lone backquote <i>") == "a ` lone backquote &lt;i&gt;"
    assert code_spans("`<script>`") == "<code>&lt;script&gt;</code>"


def test_chart_labels_drop_the_date_they_share() -> None:
    points = [RewardPoint("v", b, 1, 1, 0.5) for b in ("2026-12-04 23:21:04", "2026-12-04 23:21:05")]
    assert chart_payload(points, [], [], [])["reward"]["labels"] == ["2026-12-04 23:21:04", "23:21:05"]
    days = [RewardPoint("v", b, 1, 1, 0.5) for b in ("2026-12-03 23", "2026-12-04 00")]
    assert chart_payload(days, [], [], [])["reward"]["labels"] == ["2026-12-03 23", "2026-12-04 00"]


@pytest.mark.parametrize("sample", [4, None])
def test_stats_and_kind_shares_read_together_match_each_read_alone(log: EpisodeLog, sample: int | None) -> None:
    q = AdminQueries(log)
    stats, shares = q.policy_stats_and_kind_shares(sample=sample)
    assert stats == q.policy_version_stats(sample=sample)
    assert shares == q.kind_shares(sample=sample)
