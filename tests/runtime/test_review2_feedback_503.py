"""The feedback endpoint's 503 says which of the admin's three causes it met: a refused write and a
cancelled statement used to be answered "the episode log is unavailable", which sends a chat UI's
on-call person to the network for a read-only file or a lock_timeout. The status, ``Retry-After``
and the JSON keys stay as they were."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from runtime.test_feedback_http import _episode, _header_user, _post
from runtime.test_feedback_http import session as session  # noqa: F401 - the fixture, shared
from starlette.testclient import TestClient

from memabra import RoutingSession, _feedback_http, feedback_app
from memabra._admin import _unavailable
from memabra.storage import DatabaseNotWritableError, DatabaseTimeoutError, DatabaseUnavailableError, EpisodeLog

OUTAGE = DatabaseUnavailableError("could not connect to the episode log: connection refused")
REFUSED = DatabaseNotWritableError("attempt to write a readonly database")
LOCKED = DatabaseTimeoutError("canceling statement due to lock timeout", setting="lock_timeout")
IN_COMMIT = DatabaseTimeoutError(
    "canceling statement due to statement timeout", setting="statement_timeout", outcome_unknown=True
)


@pytest.fixture
def client(session: RoutingSession) -> Iterator[TestClient]:  # noqa: F811 - the fixture above
    with TestClient(feedback_app(session, user=_header_user)) as c:
        yield c


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (OUTAGE, "the episode log is unavailable (a connection was refused or lost)"),
        (REFUSED, "the database refused a write"),
        (
            LOCKED,
            f"the database cancelled a statement ({_unavailable._TIMEOUTS['lock_timeout']}): the feedback was not stored",
        ),
        (IN_COMMIT, "during the commit: the feedback may have been stored"),
    ],
    ids=["outage", "refused", "lock_timeout", "in_commit"],
)
def test_the_503_says_which_cause(
    client: TestClient,
    session: RoutingSession,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
    said: str,  # noqa: F811
) -> None:
    episode_id = _episode(session, "ann")

    def failing(self: EpisodeLog, *args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(EpisodeLog, "get_episode", failing)
    answer = _post(client, episode_id, {"correct": False}, **{"Idempotency-Key": "ui-event-9"})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
    assert list(answer.json()) == ["detail"]
    detail = answer.json()["detail"]
    assert said in detail and detail.endswith("retry later with the same Idempotency-Key")
    if error is not OUTAGE:
        assert "unavailable" not in detail


def test_the_timeout_words_are_the_admin_s() -> None:
    assert getattr(_feedback_http, "_TIMEOUTS", None) == _unavailable._TIMEOUTS
