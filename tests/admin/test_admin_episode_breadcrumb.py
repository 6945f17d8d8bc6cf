"""The way back from an episode to the list it was opened from: the breadcrumb keeps the list's
filters, order and page (as the browser's Back does), also after feedback is recorded on the
episode, and a deleted episode's redirect goes back to that list."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

from starlette.testclient import TestClient

from memabra.storage import EpisodeLog

from .conftest import ClientFactory, Seeded, csrf_of, feedback_form


def _rows(page: str) -> list[str]:
    table = page.split('id="episode-table"', 1)[1].split("</table>", 1)[0]
    return list(dict.fromkeys(html.unescape(h) for h in re.findall(r'<td class="nowrap"><a href="([^"]+)"', table)))


def _crumb(page: str) -> str:
    crumbs = page.split('class="crumbs"', 1)[1]
    return html.unescape(re.search(r'<a href="([^"]+)"[^>]*>Episodes</a>', crumbs).group(1))


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_an_unfiltered_list_links_plain_episode_urls(client: TestClient, seeded: Seeded) -> None:
    first = _rows(client.get("/episodes").text)[0]
    assert re.fullmatch(r"/episodes/[0-9a-f]{32}", first)
    assert _crumb(client.get(first).text) == "/episodes"


def test_the_breadcrumb_goes_back_to_the_filtered_list(client: TestClient, seeded: Seeded) -> None:
    listing = "/episodes?user=bob&kind=tool&sort=reward&limit=2"
    link = _rows(client.get(listing).text)[0]
    crumb = _crumb(client.get(link).text)
    assert urlsplit(crumb).path == "/episodes"
    assert _query(crumb) == {"user": ["bob"], "kind": ["tool"], "sort": ["reward"], "limit": ["2"]}
    # the same page comes back
    assert _rows(client.get(crumb).text) == _rows(client.get(listing).text)


def test_the_breadcrumb_keeps_the_page_of_the_list(client: TestClient, seeded: Seeded) -> None:
    first = client.get("/episodes?user=alice&limit=3").text
    following = html.unescape(re.search(r'id="next-page" href="([^"]+)"', first).group(1))
    second = client.get(following).text
    crumb = _crumb(client.get(_rows(second)[0]).text)
    assert _query(crumb) == _query(following)
    assert _rows(client.get(crumb).text) == _rows(second)


def test_feedback_keeps_the_way_back(client: TestClient, seeded: Seeded) -> None:
    link = _rows(client.get("/episodes?user=bob&corrected=no").text)[0]
    episode_id = urlsplit(link).path.rsplit("/", 1)[1]
    page = client.get(link).text
    form = page.split('id="rating-form"', 1)[1].split("</form>", 1)[0]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    fields = {k: html.unescape(v) for k, v in fields.items()}
    response = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "rating": "4"})
    assert response.status_code == 303
    crumb = _crumb(client.get(response.headers["location"]).text)
    assert _query(crumb) == {"user": ["bob"], "corrected": ["no"]}


def test_a_deleted_episode_goes_back_to_its_list(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    link = _rows(client.get("/episodes?user=carol").text)[0]
    page = client.get(link).text
    form = page.split('id="delete-episode"', 1)[1].split("</form>", 1)[0]
    fields = {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)}
    response = client.post(urlsplit(link).path + "/delete", data={**fields, "confirmed": "yes"})
    assert response.status_code == 303
    location = response.headers["location"]
    assert urlsplit(location).path == "/episodes"
    assert _query(location) == {"user": ["carol"], "notice": ["episode-deleted"]}
    assert "Episode deleted" in client.get(location).text


def test_the_way_back_keeps_only_the_lists_own_parameters(client: TestClient, seeded: Seeded) -> None:
    episode_id = seeded.episodes[3]
    crumb = _crumb(client.get(f"/episodes/{episode_id}", params={"list": "user=bob&evil=1&next=//x.example"}).text)
    assert crumb == "/episodes?user=bob"
    assert _crumb(client.get(f"/episodes/{episode_id}", params={"list": "//evil.example/"}).text) == "/episodes"
    assert _crumb(client.get(f"/episodes/{episode_id}", params={"list": "%zz&&="}).text) == "/episodes"


def test_the_rating_form_of_a_plain_episode_url_is_unchanged(client: TestClient, seeded: Seeded) -> None:
    fields = feedback_form(client, seeded.episodes[10], "rating-form")
    assert "list" not in fields or fields["list"] == ""
    assert csrf_of(client.get("/episodes").text)


def test_conversation_links_keep_the_way_back(make_client: ClientFactory, seeded: Seeded) -> None:
    client = make_client()
    link = _rows(client.get("/episodes?user=alice").text)[0]
    page = client.get(link).text
    other = re.search(r'<a href="(/episodes/[0-9a-f]{32}[^"]*)">open</a>', page)
    assert other is not None
    assert _query(_crumb(client.get(html.unescape(other.group(1))).text)) == {"user": ["alice"]}
