"""'The worst decisions of yesterday': the episodes page sorts by reward, lowest first, under the
same filters (a time window, a user ...), paged back and forth with the sort and filters kept."""

from __future__ import annotations

import re
from datetime import timedelta

from starlette.testclient import TestClient

from memabra.storage import EpisodeLog

from .conftest import NOW, Seeded


def _listed(page: str) -> list[str]:
    table = page.split('id="episode-table"', 1)[1].split("</table>", 1)[0]
    return list(dict.fromkeys(re.findall(r'href="/episodes/([^"?]+)(?:\?list=[^"]*)?"', table)))


def _next(page: str) -> str | None:
    match = re.search(r'id="next-page" href="([^"]+)"', page)
    return None if match is None else match.group(1).replace("&amp;", "&")


def test_lowest_reward_first_pages_through_every_rewarded_episode(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    rewarded = {}
    for episode_id in seeded.episodes:
        reward = log.get_reward(episode_id)
        if reward is not None:
            rewarded[episode_id] = reward.total
    assert len(rewarded) > 3
    expected = sorted(rewarded, key=lambda i: (rewarded[i], i))
    url: str | None = "/episodes?sort=reward&limit=2"
    seen: list[str] = []
    while url is not None:
        page = client.get(url)
        assert page.status_code == 200, page.text
        assert 'value="reward" selected' in page.text  # the form shows the sort it lists by
        assert 'aria-sort="ascending">Reward</th>' in page.text
        seen += _listed(page.text)
        url = _next(page.text)
        assert url is None or "sort=reward" in url
    assert seen == expected
    assert f"{len(expected)} episodes match with a reward" in page.text  # no filter: only the sort
    back = re.search(r'id="previous-page" href="([^"]+)"', page.text)
    assert back is not None and "sort=reward" in back.group(1)


def test_lowest_reward_first_keeps_the_filters(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    since = (NOW - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S")
    page = client.get(f"/episodes?sort=reward&since={since}&user=bob").text
    listed = _listed(page)
    rewards = []
    for episode_id in listed:
        summary = log.get_episode(episode_id)
        assert summary.user_id == "bob" and summary.created_at >= NOW - timedelta(days=2)
        reward = log.get_reward(episode_id)
        assert reward is not None
        rewards.append(reward.total)
    assert rewards == sorted(rewards)


def test_a_bad_sort_or_position_is_a_readable_400(client: TestClient, seeded: Seeded) -> None:
    bad = client.get("/episodes?sort=sideways")
    assert bad.status_code == 400 and "sort must be newest or reward" in bad.text
    deep = client.get("/episodes?sort=reward&cursor=zz")
    assert deep.status_code == 400 and "cursor" in deep.text
