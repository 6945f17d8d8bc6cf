"""Every page: the episode list with its filters and keyset pages, one episode, the policies page."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, update
from starlette.testclient import TestClient

from memabra import Selection
from memabra._admin._views import format_probability
from memabra._errors import SnapshotError
from memabra._records import utcnow
from memabra.storage import EpisodeLog, SuspendedTurn
from memabra.storage._models import EpisodeRow

from .conftest import NOW, XSS_ANSWER, XSS_MEMORY, XSS_QUERY, XSS_TOOL_RESULT, ClientFactory, Seeded


@pytest.fixture
def log(shared_log: tuple[EpisodeLog, Seeded]) -> EpisodeLog:
    """This module only reads: every test shares one seeded log per backend."""
    return shared_log[0]


@pytest.fixture
def seeded(shared_log: tuple[EpisodeLog, Seeded]) -> Seeded:
    return shared_log[1]


def listed_ids(page_html: str) -> list[str]:
    # a filtered list's links carry the list back (?list=...), for the episode's breadcrumb
    ids = re.findall(r'<td class="nowrap"><a href="/episodes/([0-9a-f]{32})(?:\?list=[^"]*)?">', page_html)
    return ids


def test_episode_list_newest_first(client: TestClient, seeded: Seeded) -> None:
    response = client.get("/episodes")
    assert response.status_code == 200
    ids = listed_ids(response.text)
    assert ids[0] == seeded.xss
    assert ids[1:] == list(reversed(seeded.episodes[:-1]))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("user=alice", lambda s: s.by_user["alice"]),
        ("thread=thread-carol", lambda s: s.by_user["carol"]),
        ("policy_version=test-v1", lambda s: s.by_version["test-v1"]),
        ("corrected=yes", lambda s: [s.corrected]),
        ("kind=tool", lambda s: [e for i, e in enumerate(s.episodes[:-1]) if i % 2 == 0] + [s.xss]),
        ("kind=skill", lambda s: []),
        ("q=ONERROR%3Dalert", lambda s: [s.xss]),  # words of the query, any case
        ("q=onerror&user=alice", lambda s: []),
    ],
)
def test_episode_list_filters(client: TestClient, seeded: Seeded, query: str, expected: Any) -> None:
    response = client.get(f"/episodes?{query}")
    assert response.status_code == 200
    assert sorted(listed_ids(response.text)) == sorted(expected(seeded))


def test_episode_list_time_and_reward_filters(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    all_rows = log.list_episodes(limit=100).items
    since = sorted(r.created_at for r in all_rows)[10].replace(tzinfo=None)
    response = client.get("/episodes", params={"since": since.isoformat(timespec="seconds")})
    assert len(listed_ids(response.text)) == 15
    assert f'value="{since.isoformat(timespec="seconds")}"' in response.text
    rewards = sorted(r.reward_total for r in all_rows if r.reward_total is not None)
    low, high = rewards[3], rewards[-4]
    response = client.get("/episodes", params={"reward_min": str(low), "reward_max": str(high)})
    expected = {r.id for r in all_rows if r.reward_total is not None and low <= r.reward_total <= high}
    assert set(listed_ids(response.text)) == expected
    combined = client.get("/episodes", params={"user": "bob", "until": NOW.isoformat(), "corrected": "no"})
    assert set(listed_ids(combined.text)) == set(seeded.by_user["bob"]) - {seeded.corrected}


def test_episode_list_keyset_pages(client: TestClient, seeded: Seeded) -> None:
    seen: list[str] = []
    url = "/episodes?user=alice&limit=3"
    pages = 0
    while url:
        response = client.get(url)
        assert response.status_code == 200
        ids = listed_ids(response.text)
        assert 0 < len(ids) <= 3
        seen.extend(ids)
        pages += 1
        match = re.search(r'id="next-page" href="([^"]+)"', response.text)
        url = html.unescape(match.group(1)) if match else ""
        if url:
            assert "user=alice" in url and "limit=3" in url
    assert pages == 3
    assert seen == list(reversed(seeded.by_user["alice"]))


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("reward_min=abc", "reward_min"),
        ("reward_max=nan", "reward_max"),
        ("kind=robot", "kind"),
        ("corrected=maybe", "corrected"),
        ("since=yesterday", "since"),
        ("limit=0", "limit"),
        ("cursor=%21%21", "cursor"),
        # an offset that moves the time out of datetime's range in UTC (was a 500: OverflowError)
        ("since=0001-01-01T00:00:00%2B01:00", "since"),
        ("until=9999-12-31T23:59:59-01:00", "until"),
        # a hand-made cursor with a naive time (was a 500: the time column refused it mid-query)
        ("cursor=WyIyMDI2LTEyLTAzVDA4OjI0OjI2IiwgImUiXQ", "cursor"),
    ],
)
def test_episode_list_bad_filters_name_the_field(client: TestClient, seeded: Seeded, query: str, field: str) -> None:
    response = client.get(f"/episodes?{query}")
    assert response.status_code == 400
    message = re.search(r'class="alert alert-error" role="alert"[^>]*>([^<]+)<', response.text)
    assert message and field in html.unescape(message.group(1))


def test_episode_page_shows_the_decision(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    episode = log.get_episode(seeded.episodes[0])
    page = client.get(f"/episodes/{episode.id}").text
    sel = episode.selections[0]
    # The conversation: this user's thread, every turn.
    assert page.count('class="bubble user"') == len(seeded.by_user["alice"])
    assert "answer 0 to alice" in page
    # Every offered candidate with its text, features, score, probability, slot and chosen mark.
    for sc in sel.offered:
        assert f'data-candidate="{sc.candidate.id}"' in page
        assert html.escape(sc.candidate.text) in page
    assert "hyb_z" in page and "tokens_log" in page
    assert page.count('class="check"') == len(sel.chosen_ids)
    chosen_draw = sel.slots[0]
    assert format_probability(chosen_draw.chosen_probability) in page
    assert format_probability(sel.propensity) in page
    # The counterfactual: i=0 picked the second memory, so the best one was high-scoring and left out.
    counterfactual = page.split("High-scoring but not chosen", 1)[1].split("What the current policy", 1)[0]
    assert "mem-alice-0" in counterfactual
    assert "no current policy is configured" in page
    # Tool calls and their errors, and the reward by component with its weights.
    assert "search failed: upstream timeout" in page and 'class="badge badge-error">error<' in page
    reward = page.split('id="reward-table"', 1)[1].split("</table>", 1)[0]
    for symbol in ("S", "H", "Hm", "Ht", "E", "C", "L", "X", "U"):
        assert f"<strong>{symbol}</strong>" in reward
    weights = episode.reward.weights  # type: ignore[union-attr]
    assert f"- we = {weights.we:.2f}" in html.unescape(reward)
    assert f"{episode.reward.total:.3f}" in reward  # type: ignore[union-attr]


def test_episode_page_counterfactual_now(make_client: ClientFactory, seeded: Seeded) -> None:
    def greedy(selection: Selection) -> tuple[str, ...]:
        best = sorted(selection.offered, key=lambda sc: -sc.score)
        return tuple(sc.candidate.id for sc in best[:2])

    client = make_client(current_policy=greedy)
    page = client.get(f"/episodes/{seeded.episodes[0]}").text
    now = page.split("What the current policy would choose now", 1)[1].split("Candidates offered", 1)[0]
    assert "would add" in now and "mem-alice-0" in now
    assert "would drop" in now and "mem-alice-1" in now


def test_episode_page_when_the_policy_cannot_answer(make_client: ClientFactory, seeded: Seeded) -> None:
    def no_snapshot(selection: Selection) -> tuple[str, ...]:
        raise SnapshotError("no policy snapshot is active")

    def broken(selection: Selection) -> tuple[str, ...]:
        raise RuntimeError("model file missing")

    page = make_client(current_policy=no_snapshot).get(f"/episodes/{seeded.episodes[1]}")
    assert page.status_code == 200 and "no policy snapshot is active" in page.text
    page = make_client(current_policy=broken).get(f"/episodes/{seeded.episodes[1]}")
    assert page.status_code == 200 and "the current policy failed: RuntimeError: model file missing" in page.text


def test_unknown_episode_is_404(client: TestClient, seeded: Seeded) -> None:
    response = client.get("/episodes/0123456789abcdef0123456789abcdef")
    assert response.status_code == 404
    assert "no episode with id" in response.text


def test_user_supplied_text_is_escaped(client: TestClient, seeded: Seeded) -> None:
    page = client.get(f"/episodes/{seeded.xss}").text
    for raw in (XSS_MEMORY, XSS_QUERY, XSS_ANSWER, XSS_TOOL_RESULT, "<svg onload=alert(4)>", "<i>italics</i>"):
        assert raw not in page
    assert html.escape(XSS_MEMORY, quote=False) in page
    assert html.escape(XSS_TOOL_RESULT, quote=False) in page
    assert html.escape(XSS_ANSWER, quote=False) in page
    # The only scripts on the page are the app's own files.
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/admin.js">']
    listing = client.get("/episodes").text
    assert XSS_QUERY not in listing and html.escape(XSS_QUERY, quote=False) in listing


def test_pages_carry_a_strict_content_security_policy(client: TestClient, seeded: Seeded) -> None:
    for path in ("/login", "/episodes", f"/episodes/{seeded.xss}", "/policies", "/static/admin.js"):
        response = client.get(path)
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
    cookie = client.get("/login").headers.get("set-cookie")
    fresh = TestClient(client.app).get("/login").headers["set-cookie"]
    assert cookie is None or "HttpOnly" in cookie
    assert "HttpOnly" in fresh and "samesite=strict" in fresh.lower()


def test_policies_page(client: TestClient, seeded: Seeded) -> None:
    response = client.get("/policies?window=all")
    assert response.status_code == 200
    page = response.text
    snapshots = page.split('id="snapshots"', 1)[1].split("</section>", 1)[0]
    for version, parent, status in (
        ("test-v1", "–", "retired"),
        ("test-v2", "test-v1", "active"),
        ("test-v3", "test-v2", "candidate"),
    ):
        row = snapshots.split(f'data-version="{version}"', 1)[1].split("</tr>", 1)[0]
        assert f'parent <span class="mono parent">{parent}</span>' in row and f">{status}</span>" in row
    assert "Roll back" in snapshots and snapshots.count(">Promote<") == 2
    data = json.loads(re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', page, re.S).group(1))
    assert [s["label"] for s in data["reward"]["series"]] == ["test-v1", "test-v2"]
    assert data["reward"]["labels"] == sorted(data["reward"]["labels"]) and len(data["reward"]["labels"]) >= 9
    exploration = dict(zip(data["exploration"]["labels"], data["exploration"]["exploration"], strict=True))
    for version in ("test-v1", "test-v2"):
        assert exploration[version] == pytest.approx(seeded.explored_draws[version] / seeded.draws[version])
    kinds = {s["label"]: s["data"] for s in data["kinds"]["series"]}
    assert kinds["skill"] == [0.0, 0.0] and all(0 < v < 1 for v in kinds["memory"])
    assert "No offline evaluation yet." in page
    assert '<script src="/static/chart.umd.min.js">' in page


def test_policies_page_says_whether_rewards_reach_a_learner(client: TestClient, log: EpisodeLog) -> None:
    learning = client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]
    assert 'role="alert"' not in learning and "no reward has waited longer than 15m" in learning
    with log.engine.begin() as conn:  # the final rewards have waited an hour: no learner of "test" read them
        conn.execute(
            update(EpisodeRow)
            .where(EpisodeRow.finalized_at.is_not(None))
            .values(finalized_at=utcnow() - timedelta(hours=1))
        )
    learning = client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]
    status = log.status()
    (policy,) = status.policies
    assert policy.policy == "test" and policy.checkpoint is None and policy.backlog > 0
    assert 'role="alert"' in learning and "<strong>learner test</strong>" in learning
    assert f"policy test: {policy.backlog} final reward(s) not learned" in learning
    assert "no learner holds the lease" in learning
    row = learning.split('data-policy="test"', 1)[1].split("</tr>", 1)[0]
    assert "test-v2" in row and "none yet" in row and "free" in row


def test_the_learning_card_counts_turns_paused_by_an_interrupt(client: TestClient, log: EpisodeLog) -> None:
    learning = client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]
    assert 'id="paused-turns"' not in learning
    log.suspend_turn(SuspendedTurn("turn-1", "episode-1", "ann", "t", utcnow() - timedelta(hours=2), {"version": 1}))
    learning = client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]
    assert "1 turn(s) paused by an interrupt (the oldest since" in learning
    assert '&nbsp;· <span id="paused-turns">' in learning  # not run into the figure before it


def test_the_learning_card_checks_the_policy_the_view_serves(
    make_client: ClientFactory, seeded: Seeded, log: EpisodeLog
) -> None:
    from memabra._admin import ActiveSnapshotPolicy

    with log.engine.begin() as conn:  # policy "test"'s learner is an hour behind
        conn.execute(update(EpisodeRow).values(finalized_at=utcnow() - timedelta(hours=1)))

    def card(policy: str) -> str:
        client = make_client(current_policy=ActiveSnapshotPolicy(log, policy))
        return client.get("/policies").text.split('id="learning"', 1)[1].split("</section>", 1)[0]

    serving_test = card("test")
    assert "<strong>learner test</strong>" in serving_test and "learner checked: test's" in serving_test
    serving_linear = card("linear")  # the log served "test" once; it serves "linear" now
    assert 'role="alert"' not in serving_linear and "learner checked: linear's" in serving_linear
    assert 'data-policy="test"' in serving_linear  # still listed, with its backlog


def test_policies_window(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/policies?window=7").text
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', page, re.S).group(1))
    assert len(data["reward"]["labels"]) <= 8
    assert client.get("/policies?window=5").status_code == 400


def test_static_chart_library_is_served_locally(client: TestClient) -> None:
    response = client.get("/static/chart.umd.min.js")
    assert response.status_code == 200
    assert "javascript" in response.headers["content-type"]
    assert response.text.startswith("/*!\n * Chart.js v4") and "Released under the MIT License" in response.text[:300]
    assert "http" not in client.get("/static/admin.js").text.split("*/", 1)[1]


def test_home_redirects_to_episodes(client: TestClient) -> None:
    assert client.get("/").headers["location"] == "/episodes"


def test_the_query_search_is_refilled_escaped(client: TestClient, seeded: Seeded) -> None:
    response = client.get('/episodes?q="><script>alert(1)</script>')
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in response.text
    assert 'name="q" value="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in response.text


def test_the_policies_page_reads_the_sampled_slot_draws_once(client: TestClient, log: EpisodeLog) -> None:
    # reading the draws (and each one's JSON distribution) was most of the page's time, and the
    # exploration table and the kind shares read the same draws twice (README, Admin view)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(log.engine, "before_cursor_execute", seen)
    try:
        assert client.get("/policies").status_code == 200
    finally:
        event.remove(log.engine, "before_cursor_execute", seen)
    assert len([s for s in statements if "JOIN decision_slots" in s]) == 1
