"""``POST /turns/abandon`` on a turn a process went on with after the page's handler read it (a
retry in another worker picked the lost turn up and wrote a newer copy between the read and the
abandon): 409 naming the turn and that it went on, no episode logged, the newer copy kept. The
interleaving is forced: the newer copy is written right before the abandon's write. Runs on every
configured backend."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from typing import Any

import pytest
from starlette.testclient import TestClient

from memabra._admin import _turn_pages
from memabra._records import utcnow
from memabra.storage import EpisodeLog, SuspendedTurn

from .conftest import ClientFactory
from .test_admin_turns import kept_turn


def _abandon_form(page: str, turn_id: str) -> dict[str, str]:
    row = page.split(f'data-turn="{turn_id}"', 1)[1].split("</tr>", 1)[0]
    form = row.split('<form method="post" action="/turns/abandon"', 1)[1].split("</form>", 1)[0]
    # as the page's script sends it once its question is answered
    return {**dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)), "confirmed": "yes"}


@pytest.mark.parametrize("state", ["lost", "paused"])
def test_a_turn_that_went_on_since_it_was_read_answers_409_and_nothing_is_abandoned(
    make_client: ClientFactory, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    client: TestClient = make_client()
    kept = kept_turn("t-raced", state=state)
    log.suspend_turn(kept)
    fields = _abandon_form(client.get("/turns").text, "t-raced")
    real = _turn_pages.abandon_paused_turn
    newer: list[SuspendedTurn] = []

    def retried_meanwhile(rewards: Any, read: SuspendedTurn, **who: Any) -> str:
        # after the route's read and its running check, before its write: a retry picks the turn up
        going_on = replace(read, suspended_at=utcnow(), paused=False, document={**read.document, "by": "worker-b"})
        assert log.suspend_turn(going_on)
        newer.append(going_on)
        return real(rewards, read, **who)

    monkeypatch.setattr(_turn_pages, "abandon_paused_turn", retried_meanwhile)
    response = client.post("/turns/abandon", data=fields)
    assert response.status_code == 409, response.text
    text = html.unescape(response.text)
    assert "Turn t-raced of user ann went on since it was read: it is now running since" in text
    assert "nothing was abandoned" in text
    assert not log.list_episodes().items
    now = log.suspended_turn("t-raced")
    assert now is not None and now.suspended_at == newer[0].suspended_at and now.document["by"] == "worker-b"
