"""Every time an admin page shows says it is UTC, in the same words, and carries the instant for a
machine in a ``<time datetime="...Z">`` element: running text ("the oldest ended ...", a snapshot's
last status change, a memory's history) as well as table cells, so an on-call reader in another
time zone never takes one for local time."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from memabra._admin._times import time_ago, time_element, time_text
from memabra._admin._views import format_time
from memabra.storage import EpisodeLog

from .conftest import Seeded, csrf_of

SHOWN = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
ELEMENT = re.compile(r'<time datetime="(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})Z">$')


def _assert_every_time_is_marked_utc(page: str, where: str) -> int:
    """How many times ``page`` shows; each one says UTC, and outside an attribute sits in its element."""
    found = 0
    for match in SHOWN.finditer(page):
        found += 1
        before, after = page[: match.start()], page[match.end() :]
        context = page[max(0, match.start() - 80) : match.end() + 20]
        assert after.startswith(" UTC"), f"{where}: a time without its zone: {context!r}"
        in_attribute = before.rfind('="') > before.rfind('"', 0, before.rfind('="')) and before.rfind(
            '="'
        ) > before.rfind(">")
        if in_attribute:
            continue
        element = ELEMENT.search(before[-40:])
        assert element, f"{where}: a time outside a <time datetime> element: {context!r}"
        assert f"{element.group(1)} {element.group(2)}" == match.group(0)
        assert after.startswith(" UTC</time>")
    return found


def test_every_page_marks_its_times_utc_in_a_time_element(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    episode = seeded.corrected
    pages = {
        "/episodes": 5,
        f"/episodes/{episode}": 2,
        "/policies": 3,  # the health line's "oldest ..." times and each snapshot's audit entries among them
        "/memories?user=alice": 0,
        "/turns": 0,
        "/deletions": 0,
    }
    for path, at_least in pages.items():
        response = client.get(path)
        assert response.status_code == 200, path
        assert _assert_every_time_is_marked_utc(response.text, path) >= at_least, path


def test_the_policies_running_text_names_utc(client: TestClient, seeded: Seeded) -> None:
    token = csrf_of(client.get("/policies").text)
    assert client.post("/policies/promote", data={"csrf_token": token, "version": "test-v3"}).status_code == 303
    page = client.get("/policies").text
    # a status change's audit line: "promoted by ... · <time>" must say UTC like the table cells
    audit = page.split('class="audit-last">', 1)[1].split("</span>", 1)[0]
    assert re.search(r'<time datetime="[^"]+Z">[^<]+ UTC</time>', audit), audit


def test_the_time_element_shows_utc_whatever_the_offset() -> None:
    from datetime import timedelta, timezone

    oslo = datetime(2024, 3, 1, 3, 0, 5, tzinfo=timezone(timedelta(hours=1)))
    assert str(time_element(oslo)) == '<time datetime="2024-03-01T02:00:05Z">2024-03-01 02:00:05 UTC</time>'
    assert str(time_element(None)) == ""
    assert time_element(datetime(2024, 3, 1, tzinfo=UTC)).startswith("<time")


def test_the_learning_figures_say_how_old_they_are(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/policies").text
    learning = page.split('id="learning"', 1)[1].split("</section>", 1)[0]
    # how long the oldest final reward has waited for a learner, not only since when
    assert re.search(r"the oldest final \d+[dhms][^<]* ago, at <time datetime=", learning), learning[:1500]
    # and when the page read these figures, since a tab left open goes stale
    assert re.search(r'id="read-at">read <time datetime="[^"]+Z">', learning)


def test_a_time_without_a_zone_is_shown_as_the_utc_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite hands back times without a zone; the log stores UTC, so such a time is UTC, not the
    admin host's local time (nor an error where its age is shown)."""
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+05:30, no daylight saving
    time.tzset()
    try:
        naive = datetime(2024, 3, 1, 3, 0, 5)
        assert str(time_element(naive)) == '<time datetime="2024-03-01T03:00:05Z">2024-03-01 03:00:05 UTC</time>'
        assert time_text(naive) == "2024-03-01 03:00:05 UTC"
        now = datetime(2024, 3, 1, 5, 0, 5, tzinfo=UTC)
        assert str(time_ago(naive, now)).startswith('2h ago, at <time datetime="2024-03-01T03:00:05Z">')
        assert str(time_ago(now, naive)).startswith("0s ago, at ")  # a page read with a naive clock
        assert format_time(naive) == "2024-03-01 03:00:05"  # the running text that adds " UTC" itself
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
