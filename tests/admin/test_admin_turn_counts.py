"""The unfinished turns page reads only what its header shows (how many turns are paused and lost,
each with its oldest), not the log's whole status, which counts every episode and reward and
costs tens of milliseconds a view on a large log; the counts agree with that status."""

from __future__ import annotations

import html

import pytest
from starlette.testclient import TestClient

from memabra._records import utcnow
from memabra.storage import AdminQueries, EpisodeLog
from memabra.storage._status import log_status

from .conftest import ClientFactory
from .test_admin_turns import kept_turn


def test_the_turns_page_shows_its_counts_without_reading_the_log_status(
    make_client: ClientFactory, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    for turn_id, state in (("t-lost-1", "lost"), ("t-lost-2", "lost"), ("t-paused", "paused"), ("t-run", "running")):
        log.suspend_turn(kept_turn(turn_id, state=state))
    status = log.status()
    assert (status.lost_turns, status.paused_turns) == (2, 1)
    client: TestClient = make_client()

    def whole_status(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the turns page read the whole log status")

    monkeypatch.setattr(EpisodeLog, "status", whole_status)
    page = html.unescape(client.get("/turns").text)
    summary = " ".join(page.split('id="turn-summary">', 1)[1].split("</p>", 1)[0].split())
    assert summary.startswith("2 lost (the oldest running since") and "· 1 paused (the oldest since" in summary
    assert "Lost only (2)" in page
    assert "<strong>turns</strong>: 2 turn(s) routed and never finished" in page  # the health check's alert


def test_the_counts_are_the_log_status_ones(log: EpisodeLog) -> None:
    log.suspend_turn(kept_turn("t-lost", state="lost"))
    log.suspend_turn(kept_turn("t-paused", state="paused"))
    now = utcnow()
    counts = AdminQueries(log).kept_turn_counts(now)
    status = log_status(log.engine, now)
    assert (counts.lost, counts.lost_since, counts.paused, counts.paused_since) == (
        status.lost_turns,
        status.lost_since,
        status.paused_turns,
        status.paused_since,
    )
