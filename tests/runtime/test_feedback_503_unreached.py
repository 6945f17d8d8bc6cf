"""The feedback endpoint's 503 when no connection to the log could be opened
(``DatabaseUnavailableError.may_have_written`` false): the feedback was not stored, and the answer
says so, as it does for a refused write; a connection lost with the write in flight keeps the
outage's words, which promise nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from runtime.test_feedback_http import _episode, _header_user, _post
from runtime.test_feedback_http import session as session  # noqa: F401 - the fixture, shared
from starlette.testclient import TestClient

from memabra import RoutingSession, feedback_app
from memabra.storage import DatabaseUnavailableError, EpisodeLog


@pytest.fixture
def client(session: RoutingSession) -> Iterator[TestClient]:  # noqa: F811 - the fixture above
    with TestClient(feedback_app(session, user=_header_user)) as c:
        yield c


@pytest.mark.parametrize(
    ("may_have_written", "said"),
    [
        (False, "the episode log is unavailable (no connection could be opened): the feedback was not stored"),
        (True, "the episode log is unavailable (a connection was refused or lost)"),
    ],
    ids=["never_sent", "lost"],
)
def test_the_503_says_whether_the_feedback_was_stored(
    client: TestClient,
    session: RoutingSession,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    may_have_written: bool,
    said: str,
) -> None:
    episode_id = _episode(session, "ann")

    def failing(self: EpisodeLog, *args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailableError("cannot connect to the database", may_have_written=may_have_written)

    monkeypatch.setattr(EpisodeLog, "get_episode", failing)
    answer = _post(client, episode_id, {"correct": False}, **{"Idempotency-Key": "ui-event-9"})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
    detail = answer.json()["detail"]
    assert detail == f"{said}; retry later with the same Idempotency-Key"
