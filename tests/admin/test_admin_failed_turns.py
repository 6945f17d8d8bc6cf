"""The episodes page lists failed turns by why they failed: a filter (any / failed / not failed,
and the cause) kept across pages and named in the count line, and a badge on each failed row that
says its cause in words."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from datetime import timedelta

from starlette.testclient import TestClient

from memabra import Episode, Feedback, FeedbackKind
from memabra._feedback import RewardService
from memabra._graph_steps import FAILED_TURN_SOURCE, failure_reason
from memabra._superseded import SUPERSEDED_REASON
from memabra.storage import EpisodeLog

from .conftest import NOW, Seeded, pool, slate

USER = "dana"


def _turn(log: EpisodeLog, n: int, comment: str | None) -> str:
    """Turn ``n`` of dana's, failed with ``comment`` (``None``: not failed)."""
    at = NOW - timedelta(minutes=n)
    selection = slate(USER, pool(USER), ["mem-dana-0"], version="test-v2", query=f"dana asks {n}", created_at=at)
    episode = Episode(user_id=USER, query=f"dana asks {n}", selections=(selection,), created_at=at)
    if comment is not None:
        payload = {"accepted": False, "comment": comment}
        failed = Feedback(episode.id, FeedbackKind.PROGRAMMATIC, FAILED_TURN_SOURCE, payload, received_at=at)
        episode = replace(episode, feedback=(failed,))
    RewardService(log).record(episode)
    return episode.id


def _ids(page: str) -> list[str]:
    return re.findall(r'<td class="nowrap"><a href="/episodes/([0-9a-f]{32})(?:\?list=[^"]*)?">', page)


def _row(page: str, episode_id: str) -> str:
    return page.split(f'<a href="/episodes/{episode_id}', 1)[1].split("</tr>", 1)[0]


def _dana(log: EpisodeLog) -> dict[str, str]:
    return {
        "model": _turn(log, 1, failure_reason("model_error (chat-model)", "RateLimitError: 429")),
        "ok": _turn(log, 2, None),
        "superseded": _turn(log, 3, SUPERSEDED_REASON),
        "model2": _turn(log, 4, failure_reason("model_error (chat-model)", "APIConnectionError: reset")),
        "tool": _turn(log, 5, failure_reason("tool_error (search_mail)", "TimeoutError: timed out")),
    }


def _count(page: str) -> str:
    found = re.search(r'id="episode-count">(.*?)</p>', page, re.S)
    assert found, page
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


def test_failed_turns_are_filtered_by_cause_and_named_in_the_count(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    made = _dana(log)
    failed = client.get(f"/episodes?user={USER}&failed=yes").text
    assert set(_ids(failed)) == {made["model"], made["superseded"], made["model2"], made["tool"]}
    assert _count(failed) == "4 episodes match these filters · failed turns · showing 4"
    assert '<option value="yes" selected>failed</option>' in failed
    model = client.get(f"/episodes?user={USER}&cause=model_error").text
    assert _ids(model) == [made["model"], made["model2"]]
    assert _count(model) == "2 episodes match these filters · failed with model_error · showing 2"
    assert '<option value="model_error" selected>model_error</option>' in model
    not_failed = client.get(f"/episodes?user={USER}&failed=no").text
    assert _ids(not_failed) == [made["ok"]] and "not failed" in _count(not_failed)
    # every seeded episode is a turn that finished: none of them is failed
    assert len(_ids(client.get("/episodes?failed=no&limit=500").text)) == len(seeded.episodes) + 1
    worst = client.get(f"/episodes?user={USER}&cause=superseded&sort=reward").text
    assert _ids(worst) == [made["superseded"]]


def test_each_failed_row_says_its_cause_in_words(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    made = _dana(log)
    page = client.get(f"/episodes?user={USER}").text
    badge = re.compile(
        r'<span class="badge [^"]*failure" title="([^"]+)"><span class="sr-only">failed turn: </span>(\w+)</span>'
    )
    assert badge.findall(_row(page, made["model"])) == [("failed turn: a model call raised", "model_error")]
    ((title, word),) = badge.findall(_row(page, made["superseded"]))
    assert word == "superseded" and "new message" in title and "badge-warn" in _row(page, made["superseded"])
    assert badge.findall(_row(page, made["tool"]))[0][1] == "tool_error"
    assert "failure" not in _row(page, made["ok"])
    # the controls are labelled, as every other filter
    form = page.split('id="filters"', 1)[1].split("</form>", 1)[0]
    for name in ("failed", "cause"):
        assert re.search(rf'<label[^>]*>[^<]*\s*<select name="{name}">', form), name


def test_the_failure_filter_is_kept_across_pages_and_back_from_an_episode(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    made = _dana(log)
    seen: list[str] = []
    url = f"/episodes?user={USER}&cause=model_error&limit=1"
    while url:
        page = client.get(url).text
        seen += _ids(page)
        next_link = re.search(r'id="next-page" href="([^"]+)"', page)
        url = html.unescape(next_link.group(1)) if next_link else ""
        if url:
            assert "cause=model_error" in url and f"user={USER}" in url
    assert seen == [made["model"], made["model2"]]
    link = re.search(rf'href="/episodes/{made["model2"]}\?list=([^"]+)"', page)
    assert link and "cause%3Dmodel_error" in link.group(1)


def test_a_bad_failure_filter_is_refused_naming_the_choices(client: TestClient, seeded: Seeded) -> None:
    bad = client.get("/episodes?cause=timeout")
    assert bad.status_code == 400
    assert (
        "cause must be one of recursion_limit, model_error, tool_error, superseded, got &#39;timeout&#39;" in bad.text
    )
    contradiction = client.get("/episodes?failed=no&cause=tool_error")
    assert contradiction.status_code == 400 and "not &#39;not failed&#39;" in contradiction.text
    assert client.get("/episodes?failed=maybe").status_code == 400
