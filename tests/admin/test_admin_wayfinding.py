"""Finding one's way: the navigation (deletions included, the right tab highlighted), the admin's
own page for an unknown URL, a user with nothing stored, the way back from a refused erasure, and
the scales a reader needs (reward components, the chart's time buckets, the snapshots' window)."""

from __future__ import annotations

import html
import json
import re

import pytest
from starlette.testclient import TestClient

from memabra import SQLMemory
from memabra._admin._reward_view import reward_lines
from memabra._records import RewardBreakdown, RewardComponents, RewardWeights
from memabra._reward import RewardConfig
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, Seeded, csrf_of


def _nav(page: str) -> dict[str, bool]:
    """The navigation's links, each with whether it is the highlighted one."""
    nav = page.split('<nav class="nav"', 1)[1].split("</nav>", 1)[0]
    return {href: "active" in cls for href, cls in re.findall(r'<a href="([^"]+)" class="([^"]*)"', nav)}


@pytest.mark.parametrize(
    ("url", "active"),
    [
        ("/episodes", "/episodes"),
        ("/policies", "/policies"),
        ("/memories", "/memories"),
        ("/deletions", "/deletions"),
        ("/deletions?user=alice", "/deletions"),
    ],
)
def test_every_section_is_in_the_navigation_and_only_its_own_is_highlighted(
    client: TestClient, seeded: Seeded, url: str, active: str
) -> None:
    page = client.get(url).text
    nav = _nav(page)
    assert list(nav) == ["/episodes", "/policies", "/memories", "/deletions"]
    assert [href for href, on in nav.items() if on] == [active]
    # a screen reader is told which section this is, not only shown it in colour
    links = page.split('<nav class="nav"', 1)[1].split("</nav>", 1)[0]
    assert re.findall(r'<a href="([^"]+)"[^>]* aria-current="page"', links) == [active]


def test_the_selected_policies_window_is_announced(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/policies?window=90").text
    windows = page.split('aria-label="time window"', 1)[1].split("</nav>", 1)[0]
    assert re.findall(r'href="/policies\?window=(\w+)"[^>]* aria-current="true"', windows) == ["90"]


def test_an_unknown_url_gets_the_admins_own_404_page(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client()
    response = client.get("/nope")
    assert response.status_code == 404
    assert "text/html" in response.headers["content-type"]
    page = html.unescape(response.text)
    assert "<title>Not found · memabra</title>" in page and "/nope" in page
    assert list(_nav(page)) == ["/episodes", "/policies", "/memories", "/deletions"]
    assert "default-src 'none'" in response.headers["content-security-policy"]
    # signed out: the same page, with a way to sign in and no navigation
    anonymous = make_client(signed_in=False).get("/nope/deeper")
    assert anonymous.status_code == 404 and '<nav class="nav"' not in anonymous.text
    assert 'href="/login"' in anonymous.text and "<title>Not found · memabra</title>" in anonymous.text


def test_a_user_with_nothing_stored_is_said_to_have_nothing(make_client: ClientFactory, log: EpisodeLog) -> None:
    from factories import episode as make_episode

    log.log_episodes([make_episode("eve")])  # episodes, no memories
    SQLMemory(log).remember("ann", "I live in Lyon")
    client = make_client()
    nobody = html.unescape(client.get("/memories?user=nobody").text)
    assert "No memories or episodes for user 'nobody'" in nobody
    assert 'id="erase-user-form"' not in nobody and "Erase nobody" not in nobody and 'id="memory-table"' not in nobody
    # a filter that matches nothing is not "nothing stored"
    filtered = client.get("/memories?user=ann&q=paris").text
    assert "No memories match." in filtered and 'id="erase-user-form"' in filtered
    # a user with episodes but no memories keeps the page, and the erase form for their episodes
    eve = client.get("/memories?user=eve").text
    assert "No memories or episodes" not in eve and 'id="erase-user-form"' in eve


def test_a_refused_erasure_leads_back_to_the_users_memories(make_client: ClientFactory, log: EpisodeLog) -> None:
    SQLMemory(log).remember("a b/c", "I live in Lyon")
    client = make_client()
    csrf = csrf_of(client.get("/memories?user=a%20b%2Fc").text)
    wrong = client.post("/erase", data={"csrf_token": csrf, "user": "a b/c", "confirm": "a b"})
    assert wrong.status_code == 400 and "Not erased" in wrong.text
    assert 'href="/memories?user=a%20b%2Fc"' in wrong.text and "Back to the episodes" not in wrong.text
    assert "Back to a b/c&#39;s memories" in wrong.text


def test_each_reward_component_says_its_range_and_meaning() -> None:
    components = RewardComponents(s=1.0, hm=0.5, e=0.2, l=0.0, x=0.182)
    lines = {line.symbol: line for line in reward_lines(RewardBreakdown(components, RewardWeights(), "v1"))}
    assert lines["X"].scale == "0…1: injected tokens against the token budget"
    assert lines["L"].scale == "0…1: half for latency past 5 s, half for steps past 4"
    assert lines["S"].scale.startswith("−0.5…1: ")
    assert lines["Hm"].scale.startswith("−1…1: ")
    assert lines["E"].scale.startswith("0…1: 0.2 per failed tool call")
    assert all(line.scale for line in lines.values())
    # the thresholds are the reward config's, not a copy of its defaults
    slow = reward_lines(
        RewardBreakdown(components, RewardWeights(), "v1"), RewardConfig(latency_free_ms=2_500, free_steps=6)
    )
    assert next(line for line in slow if line.symbol == "L").scale == (
        "0…1: half for latency past 2.5 s, half for steps past 6"
    )


def test_the_episode_page_shows_each_components_scale(client: TestClient, seeded: Seeded) -> None:
    page = html.unescape(client.get(f"/episodes/{seeded.episodes[0]}").text)
    reward = page.split('id="reward-table"', 1)[1].split("</table>", 1)[0]
    assert "0…1: injected tokens against the token budget" in reward
    assert "0…1: half for latency past 5 s, half for steps past 4" in reward
    assert "context cost" in reward


def test_the_reward_chart_names_its_time_axis_and_bucket(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/policies?window=all").text
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
    assert data["reward"]["bucket"] == "day" and data["reward"]["axis"] == "time (UTC), one point per day"
    card = html.unescape(page.split('id="chart-reward-card"', 1)[1].split("</section>", 1)[0])
    assert "in each day (UTC), over all time" in card
    week = client.get("/policies?window=7").text
    week_data = json.loads(re.search(r'id="chart-data">(.*?)</script>', week, re.S).group(1))  # type: ignore[union-attr]
    assert week_data["reward"]["axis"] == f"time (UTC), one point per {week_data['reward']['bucket']}"
    week_card = html.unescape(week.split('id="chart-reward-card"', 1)[1].split("</section>", 1)[0])
    assert f"in each {week_data['reward']['bucket']} (UTC), over the last 7 days" in week_card


@pytest.mark.parametrize(("window", "label"), [("7", "7 days"), ("30", "30 days"), ("all", "all time")])
def test_the_snapshots_columns_say_which_window_they_count(
    client: TestClient, seeded: Seeded, window: str, label: str
) -> None:
    page = client.get(f"/policies?window={window}").text
    head = html.unescape(page.split('id="snapshots"', 1)[1].split("</thead>", 1)[0])
    headers = [re.sub(r"<[^>]+>", " ", h).split() for h in re.findall(r"<th[^>]*>(.*?)</th>", head, re.S)]
    texts = [" ".join(h) for h in headers]
    assert f"Episodes ({label})" in texts and f"Mean reward ({label})" in texts
