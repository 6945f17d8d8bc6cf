"""The episode list's kinds are the kinds chosen, it says how many episodes match, and it pages
back as well as forward."""

from __future__ import annotations

import html
import re

import pytest
from starlette.testclient import TestClient

from memabra import Episode
from memabra._feedback import RewardService
from memabra.storage import EpisodeLog, _episode_listing

from .conftest import NOW, Seeded, pool, slate


def _ids(page: str) -> list[str]:
    return re.findall(r'<td class="nowrap"><a href="/episodes/([0-9a-f]{32})(?:\?list=[^"]*)?">', page)


def _kinds_cell(page: str, episode_id: str) -> str:
    row = page.split(f'<a href="/episodes/{episode_id}', 1)[1].split("</tr>", 1)[0]
    return re.search(r'<td class="kinds">(.*?)</td>', row, re.S).group(1)  # type: ignore[union-attr]


def _log_turn(log: EpisodeLog, user: str, picks: list[str]) -> str:
    """One turn offered memories and tools whose slots chose ``picks`` (every kind's last draw stops)."""
    selection = slate(user, pool(user), picks, version="test-v2", query=f"{user} asks", created_at=NOW)
    episode = Episode(user_id=user, query=f"{user} asks", selections=(selection,), created_at=NOW)
    RewardService(log).record(episode)
    return episode.id


def test_kinds_mean_the_kinds_chosen_not_the_kinds_offered(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    memory_only = _log_turn(log, "erin", ["mem-erin-0"])  # the tool slot drew stop at once
    nothing = _log_turn(log, "erin", [])
    page = client.get("/episodes?user=erin").text
    assert '<th scope="col" title=' in page and "Kinds chosen</th>" in page and "Kind chosen" in page
    chosen = _kinds_cell(page, memory_only)
    assert 'chip-memory">memory<' in chosen and "chip-tool" not in chosen
    assert "chip-" not in _kinds_cell(page, nothing) and "none" in _kinds_cell(page, nothing)
    assert _ids(client.get("/episodes?user=erin&kind=tool").text) == []
    assert _ids(client.get("/episodes?user=erin&kind=memory").text) == [memory_only]


def test_the_list_says_how_many_episodes_match(client: TestClient, seeded: Seeded) -> None:
    def count(query: str) -> str:
        page = client.get(f"/episodes?{query}").text
        return html.unescape(re.search(r'id="episode-count">([^<]*)<', page).group(1))  # type: ignore[union-attr]

    assert count("") == f"{len(seeded.episodes)} episodes match · showing {len(seeded.episodes)}"
    assert count("user=alice&limit=3") == "8 episodes match these filters · showing 3"
    assert count("corrected=yes") == "1 episode matches these filters · showing 1"
    assert count("user=nobody") == "0 episodes match these filters"


def test_a_large_count_stops_at_its_cap(client: TestClient, seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_episode_listing, "COUNT_CAP", 5)
    assert "5+ episodes match · showing" in client.get("/episodes").text


def test_pages_go_back_as_well_as_forward(client: TestClient, seeded: Seeded) -> None:
    def links(page: str) -> dict[str, str]:
        return {k: html.unescape(v) for k, v in re.findall(r'id="(\w+-page)" href="([^"]+)"', page)}

    forward: list[list[str]] = []
    url = "/episodes?user=alice&limit=3"
    while url:
        page = client.get(url).text
        forward.append(_ids(page))
        url = links(page).get("next-page", "")
    assert len(forward) == 3
    last = client.get(url or _last_page_url(client)).text
    # from the third page back: the second, then the first, which has no way further back
    second = client.get(links(last)["previous-page"]).text
    assert _ids(second) == forward[1] and "first-page" not in links(second)
    first_url = links(second)["previous-page"]
    assert "cursor" not in first_url and "user=alice" in first_url and "limit=3" in first_url
    first = client.get(first_url).text
    assert _ids(first) == forward[0] and "previous-page" not in links(first)
    assert links(last)["first-page"] == first_url


def _last_page_url(client: TestClient) -> str:
    url = "/episodes?user=alice&limit=3"
    while True:
        match = re.search(r'id="next-page" href="([^"]+)"', client.get(url).text)
        if match is None:
            return url
        url = html.unescape(match.group(1))
