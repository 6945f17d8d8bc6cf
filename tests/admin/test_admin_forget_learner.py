"""Forget a learner checkpoint from the policies page, where the page names the command
(``memabra policies forget-learner --policy P``): the same write, with the app's write conventions
(send-once form with its CSRF token, a confirmation naming what happens, refused while the
policy's learner holds its lease, logged, the result shown after the redirect)."""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from factories import readable_final_rewards
from memabra import PolicySnapshot
from memabra._admin import ActiveSnapshotPolicy
from memabra.storage import EpisodeLog, LearnerLease, LearnerStore
from memabra.storage._learner import START

from .conftest import TOKEN, ClientFactory, Seeded


@pytest.fixture
def gone(seeded: Seeded, log: EpisodeLog) -> Iterator[str]:
    """Policy "gone" learned from the log once and is no longer served: its checkpoint holds
    retention back."""
    finals = readable_final_rewards(LearnerStore(log.engine))
    LearnerStore(log.engine).commit(
        PolicySnapshot("gone", "gone-1", b"model"), previous=START, position=finals[0].position, learned=1
    )
    yield "gone"


def _client(make_client: ClientFactory, log: EpisodeLog, **kwargs: object) -> TestClient:
    return make_client(current_policy=ActiveSnapshotPolicy(log, "test"), **kwargs)


def _holds(page: str) -> str:
    return page.split('id="retention-holds"', 1)[1].split("</ul>", 1)[0]


def _form(page: str) -> dict[str, str]:
    form = _holds(page).split('action="/policies/forget-learner"', 1)[1].split("</form>", 1)[0]
    # as the page's script sends it once its question is answered
    return {**dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)), "confirmed": "yes"}


def test_the_command_has_a_button_that_asks_first(make_client: ClientFactory, log: EpisodeLog, gone: str) -> None:
    holds = _holds(_client(make_client, log).get("/policies").text)
    assert "memabra policies forget-learner --policy gone" in holds  # the command stays, for scripts
    assert re.search(r'<button type="submit"[^>]*>Forget gone\'s learner</button>', holds)
    question = html.unescape(re.search(r'data-confirm="([^"]+)"', holds).group(1))
    assert "gone" in question and "retention" in question and "snapshots stay" in question
    assert "from the start of the log" in question


def test_forget_learner_forgets_and_says_so(
    make_client: ClientFactory, log: EpisodeLog, gone: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(make_client, log)
    fields = _form(client.get("/policies").text)
    assert fields["policy"] == "gone"
    caplog.set_level(logging.WARNING, "memabra")
    response = client.post("/policies/forget-learner", data=fields)
    assert response.status_code == 303, response.text
    assert LearnerStore(log.engine).checkpoint("gone") is None
    assert log.get_snapshot("gone-1").version == "gone-1"  # its snapshots stay
    after = html.unescape(client.get(response.headers["location"]).text)
    assert "Forgot the learner checkpoint of policy gone" in after
    assert 'id="retention-holds"' not in after
    assert "token sign-in" in caplog.text and "gone" in caplog.text
    # sent again (a second reviewer, a stale tab): nothing to forget, said as such, not an error
    again = client.post("/policies/forget-learner", data=fields)
    assert again.status_code == 303
    assert "has no learner checkpoint" in html.unescape(client.get(again.headers["location"]).text)


def test_forget_learner_is_refused_while_its_learner_holds_the_lease(
    make_client: ClientFactory, log: EpisodeLog, gone: str
) -> None:
    client = _client(make_client, log)
    fields = _form(client.get("/policies").text)
    lease = LearnerLease(log.engine, "gone")
    assert lease.acquire()
    try:
        response = client.post("/policies/forget-learner", data=fields)
    finally:
        lease.release()
    assert response.status_code == 409
    assert "holds the learner lease" in html.unescape(response.text)
    assert 'href="/policies#learning"' in response.text
    assert LearnerStore(log.engine).checkpoint("gone") is not None


def test_forget_learner_follows_the_write_guards(make_client: ClientFactory, log: EpisodeLog, gone: str) -> None:
    client = _client(make_client, log)
    fields = _form(client.get("/policies").text)
    assert client.post("/policies/forget-learner", data={**fields, "csrf_token": "x"}).status_code == 403
    assert client.post("/policies/forget-learner", data={"csrf_token": fields["csrf_token"]}).status_code == 400
    read_only = _client(make_client, log, read_only=True)
    page = read_only.get("/policies").text
    assert "memabra policies forget-learner --policy gone" in page and "/policies/forget-learner" not in page
    bearer = read_only.post("/policies/forget-learner", data=fields, headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 403
    assert LearnerStore(log.engine).checkpoint("gone") is not None
