"""The admin's 503 for a change the database never received: a connection that could not be opened
(``DatabaseUnavailableError.may_have_written`` false) sent nothing, so the page says the change was
not saved and to send it again, instead of "may or may not have been recorded", which sends a person
to look for a change that cannot be there. A connection lost with the write in flight still says so;
a page that only reads says neither."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from factories import episode
from memabra._admin import create_app
from memabra._feedback import RewardService
from memabra.storage import DatabaseUnavailableError, EpisodeLog, open_log

from .conftest import TOKEN

BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    with open_log(f"sqlite:///{tmp_path / 'admin.db'}") as log:
        ep = episode()
        log.log_episode(ep)
        with TestClient(create_app(log, token=TOKEN)) as client:
            yield client, ep.id


def _fail_writes(monkeypatch: pytest.MonkeyPatch, *, may_have_written: bool) -> None:
    def failing(self: RewardService, *args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailableError(
            "cannot connect to the database postgresql+psycopg://memabra:***@db/memabra: connection refused",
            may_have_written=may_have_written,
        )

    monkeypatch.setattr(RewardService, "post_feedback", failing)


def _rate(client: TestClient, episode_id: str, **headers: str) -> Any:
    form = {"action": "rating", "rating": "4", "idempotency_key": "k-1"}
    return client.post(f"/episodes/{episode_id}/feedback", data=form, headers={**BEARER, **headers})


@pytest.mark.parametrize("kind", ["html", "json"])
def test_a_change_that_never_reached_the_database_is_said_to_be_unsaved(
    served: tuple[TestClient, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    client, episode_id = served
    _fail_writes(monkeypatch, may_have_written=False)
    headers = {"accept": "application/json"} if kind == "json" else {}
    with caplog.at_level(logging.WARNING, logger="memabra"):
        answer = _rate(client, episode_id, **headers)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
    said = answer.json()["detail"] if kind == "json" else answer.text
    assert "no connection to it could be opened" in said
    assert "Your change was not saved (it never reached the database): send it again" in said
    assert "may or may not" not in said
    assert "connection refused" in caplog.text  # the reason is the operator's, in the log


def test_a_change_whose_connection_was_lost_may_have_been_recorded(
    served: tuple[TestClient, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, episode_id = served
    _fail_writes(monkeypatch, may_have_written=True)
    answer = _rate(client, episode_id)
    assert answer.status_code == 503
    assert "may or may not have been recorded" in answer.text and "not saved" not in answer.text


def test_a_read_says_neither(served: tuple[TestClient, str], monkeypatch: pytest.MonkeyPatch) -> None:
    client, episode_id = served

    def failing(self: EpisodeLog, *args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailableError("cannot connect to the database", may_have_written=False)

    monkeypatch.setattr(EpisodeLog, "get_episode", failing)
    answer = client.get(f"/episodes/{episode_id}", headers=BEARER)
    assert answer.status_code == 503 and "no connection to it could be opened" in answer.text
    assert "not saved" not in answer.text and "may or may not" not in answer.text
