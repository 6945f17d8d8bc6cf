"""Paging the unfinished turns (``/turns``) by cursor on (suspended_at, turn_id): after an outage
the log keeps tens of thousands of turns, and turns are kept and logged while on-call pages
through them. A page starts after the last row of the one before, so nothing repeats or is
skipped, there is no depth past which the list cannot go, and a cursor that is not one is a 400
naming it. Runs on every configured backend."""

from __future__ import annotations

import base64
import html
import json
import re
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from memabra._feedback import RewardService
from memabra._paused_turns import abandon_paused_turn
from memabra._records import utcnow
from memabra.storage import AdminQueries, EpisodeLog
from memabra.storage._models import SuspendedTurnRow, table_of

from .conftest import ClientFactory
from .test_admin_turns import _abandon_form, kept_turn


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    return make_client()


def _turn_ids(page: str) -> list[str]:
    return re.findall(r'data-turn="([^"]+)"', page)


def _link(page: str, link_id: str) -> str:
    match = re.search(rf'id="{link_id}" href="([^"]+)"', page)
    assert match, f"no {link_id} link"
    return html.unescape(match.group(1))


def _summary(page: str) -> str:
    return html.unescape(page.split('id="turn-summary"', 1)[1].split("</p>", 1)[0])


@pytest.mark.parametrize("meanwhile", ["kept", "logged"])
def test_a_turn_kept_or_logged_before_the_cursor_neither_repeats_nor_skips_a_row(
    client: TestClient, log: EpisodeLog, meanwhile: str
) -> None:
    turns = [kept_turn(f"t-{n:02d}", state="paused", age=timedelta(minutes=100 - n)) for n in range(53)]
    for kept in turns:
        log.suspend_turn(kept)
    first = client.get("/turns").text
    assert _turn_ids(first) == [f"t-{n:02d}" for n in range(50)]
    following = _link(first, "next-page")
    if meanwhile == "kept":  # an older turn comes back (a retry re-keeps it): offset paging repeated t-49
        log.suspend_turn(kept_turn("t-early", state="paused", age=timedelta(minutes=200)))
    else:  # someone abandons a turn of page 1: offset paging skipped t-50
        abandon_paused_turn(RewardService(log), turns[0], actor="cli:oncall")
    second = client.get(following).text
    assert _turn_ids(second) == ["t-50", "t-51", "t-52"]
    # where the page stands in the list as it is now
    assert ("showing 52–54" if meanwhile == "kept" else "showing 50–52") in _summary(second)
    assert 'id="next-page"' not in second
    # the page before it: the 50 turns before t-50 as the list is now, or (49 left) the first page
    if meanwhile == "kept":
        previous = _turn_ids(client.get(_link(second, "previous-page")).text)
        assert previous == [f"t-{n:02d}" for n in range(50)]
    else:
        assert _link(second, "previous-page") == "/turns"


def test_an_abandon_from_a_later_page_comes_back_to_that_page(client: TestClient, log: EpisodeLog) -> None:
    for n in range(53):
        log.suspend_turn(kept_turn(f"t-{n:02d}", state="paused", age=timedelta(minutes=100 - n)))
    following = _link(client.get("/turns").text, "next-page")
    second = client.get(following).text
    response = client.post("/turns/abandon", data=_abandon_form(second, "t-51"))
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    assert "cursor=" in location and location.split("cursor=", 1)[1] == following.split("cursor=", 1)[1]
    assert _turn_ids(client.get(location).text) == ["t-50", "t-52"]
    # a hand-edited cursor in the form goes back to the first page rather than into the URL
    fields = {**_abandon_form(client.get(location).text, "t-50"), "cursor": "<script>"}
    back = client.post("/turns/abandon", data=fields).headers["location"]
    assert "cursor" not in back and "script" not in back


def _cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "abc",
        "not a cursor!",
        _cursor(["2026-01-01T00:00:00", "t-1"]),  # a naive time
        _cursor(["yesterday", "t-1"]),
        _cursor(["2026-01-01T00:00:00+00:00"]),
        _cursor([1, 2]),
        _cursor({"at": "2026-01-01T00:00:00+00:00"}),
    ],
)
def test_a_cursor_that_is_not_one_is_refused_naming_it(client: TestClient, log: EpisodeLog, cursor: str) -> None:
    log.suspend_turn(kept_turn("t-paused", state="paused"))
    for listing in ("/turns", "/turns?lost=1"):
        response = client.get(listing, params={"cursor": cursor})
        assert response.status_code == 400
        assert "cursor is not a page cursor of the unfinished turns" in html.unescape(response.text)


def test_an_offset_link_is_refused_naming_why(client: TestClient) -> None:
    response = client.get("/turns?offset=50")
    assert response.status_code == 400
    assert "offset is no longer a parameter" in html.unescape(response.text)


def test_lost_only_pages_by_cursor_among_paused_and_running_turns(client: TestClient, log: EpisodeLog) -> None:
    for n in range(52):
        log.suspend_turn(kept_turn(f"t-{n:02d}", state="lost", age=timedelta(minutes=100 - n)))
        # paused turns interleaved with the lost ones (and kept at the same moment as one)
        log.suspend_turn(kept_turn(f"p-{n:02d}", state="paused", age=timedelta(hours=1, minutes=100 - n)))
    log.suspend_turn(kept_turn("t-running", state="running"))
    first = client.get("/turns?lost=1").text
    assert _turn_ids(first) == [f"t-{n:02d}" for n in range(50)]
    following = _link(first, "next-page")
    assert "lost=1" in following and "cursor=" in following
    second = client.get(following).text
    assert _turn_ids(second) == ["t-50", "t-51"]
    assert "showing 51–52 of the lost ones" in _summary(second)
    assert _link(second, "previous-page") == "/turns?lost=1" and _link(second, "first-page") == "/turns?lost=1"


def test_previous_pages_lead_back_through_the_list(log: EpisodeLog) -> None:
    for n in range(7):
        log.suspend_turn(kept_turn(f"t-{n}", state="paused", age=timedelta(minutes=100 - n)))
    queries = AdminQueries(log)
    pages = [queries.kept_turns(None, 2)]
    while pages[-1].next_cursor:
        pages.append(queries.kept_turns(pages[-1].next_cursor, 2))
    assert [[t.turn_id for t in p.items] for p in pages] == [["t-0", "t-1"], ["t-2", "t-3"], ["t-4", "t-5"], ["t-6"]]
    assert [p.position for p in pages] == [0, 2, 4, 6]
    assert not pages[0].has_previous and pages[1].has_previous and pages[1].previous_cursor is None
    for before, page in zip(pages[1:], pages[2:], strict=False):
        assert queries.kept_turns(page.previous_cursor, 2).items == before.items


def test_paging_goes_past_ten_thousand_turns(client: TestClient, log: EpisodeLog) -> None:
    # an outage's worth of turns, written at once; seven share each moment, so the turn id orders them
    total = 10_060
    start = utcnow() - timedelta(days=2)
    rows = [
        {
            "turn_id": f"t-{n:05d}",
            "episode_id": f"e-{n:05d}",
            "user_id": "ann",
            "thread_id": None,
            "suspended_at": start + timedelta(seconds=n // 7),
            "document": {"query": f"query {n}", "steps": []},
            "paused": n % 2 == 0,
        }
        for n in range(total)
    ]
    with log.engine.begin() as conn:
        conn.execute(table_of(SuspendedTurnRow).insert(), rows)
    queries = AdminQueries(log)
    seen: list[str] = []
    cursor = None
    while True:
        page = queries.kept_turns(cursor, 500)
        assert page.position == len(seen)
        seen += [t.turn_id for t in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
        if len(seen) == 10_000:
            deep = cursor
    assert seen == [r["turn_id"] for r in rows]
    # the page, 10,000 turns in, and the one after it
    page = client.get(f"/turns?cursor={deep}").text
    assert _turn_ids(page) == [f"t-{n:05d}" for n in range(10_000, 10_050)]
    assert "showing 10,001–10,050" in _summary(page)
    last = client.get(_link(page, "next-page")).text
    assert _turn_ids(last) == [f"t-{n:05d}" for n in range(10_050, total)] and 'id="next-page"' not in last
    assert _turn_ids(client.get(_link(last, "previous-page")).text) == _turn_ids(page)
    # the lost ones (the running half, kept two days ago) page to their end as well
    lost = queries.kept_turns(None, 500, lost_at=utcnow())
    for _ in range(10):
        assert lost.next_cursor is not None
        lost = queries.kept_turns(lost.next_cursor, 500, lost_at=utcnow())
    assert lost.position == 5_000 and lost.next_cursor is None
    assert [t.turn_id for t in lost.items] == [f"t-{n:05d}" for n in range(10_001, total, 2)]
