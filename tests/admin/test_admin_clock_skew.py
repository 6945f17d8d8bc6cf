"""The admin judges feedback windows and lost turns by the database's clock, as the log does: an
admin host whose clock is minutes apart from it neither warns that feedback will not be applied
while the window is open, nor calls a lost turn running (and refuses to abandon it). Skew is
simulated by patching the clock the admin's modules read (``utcnow``). On every configured backend."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from factories import episode
from memabra._feedback import RewardService
from memabra._records import utcnow
from memabra._reward import RewardConfig
from memabra.storage import EpisodeLog

from .conftest import ClientFactory
from .test_admin_turns import _abandon_form, kept_turn

SKEW = timedelta(minutes=5)


def test_an_admin_host_ahead_offers_feedback_as_applied_while_the_window_is_open(
    make_client: ClientFactory, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep = episode()
    RewardService(log, RewardConfig(feedback_window=timedelta(minutes=2))).record(ep)
    client: TestClient = make_client()
    with monkeypatch.context() as host:  # the admin host runs five minutes ahead
        host.setattr("memabra._admin._app.utcnow", lambda: utcnow() + SKEW, raising=False)
        page = client.get(f"/episodes/{ep.id}").text
    assert 'id="feedback-window"' in page and 'id="feedback-late-warning"' not in page
    assert "Record correction" in page  # not "Record late correction": the log applies it


def test_an_admin_host_behind_lists_and_abandons_a_lost_turn(
    make_client: ClientFactory, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = kept_turn("t-lost", state="lost", age=timedelta(minutes=2))  # routed 62 minutes ago
    log.suspend_turn(kept)
    client: TestClient = make_client()
    with monkeypatch.context() as host:  # the admin host runs five minutes behind
        host.setattr("memabra._admin._turn_pages.utcnow", lambda: utcnow() - SKEW, raising=False)
        page = client.get("/turns?lost=1").text
        assert re.findall(r'data-turn="([^"]+)"', page) == ["t-lost"]
        response = client.post("/turns/abandon", data=_abandon_form(page, "t-lost"))
    assert response.status_code == 303, response.text
    assert log.get_episode(kept.episode_id).selections and log.suspended_turn("t-lost") is None


def test_an_admin_host_ahead_does_not_flag_a_deletion_in_progress_as_stopped(
    make_client: ClientFactory, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the audit trail is stamped by the database's clock, and `memabra status` judges it so: an admin
    # host past the allowed lag ahead called a deletion that progressed a minute ago stopped part way
    from memabra.storage._deletion_log import start_deletion

    start_deletion(
        log._tx,
        actor="cli:ops",
        client=None,
        episode_ids=None,
        user_id="ann",
        created_before=None,
        include_unlearned=True,
        kept=0,
    )
    client: TestClient = make_client()
    with monkeypatch.context() as host:  # the admin host runs twenty minutes ahead
        host.setattr("memabra._admin._deletion_pages.utcnow", lambda: utcnow() + timedelta(minutes=20), raising=False)
        page = client.get("/deletions").text
    assert "unfinished" in page and "Stopped part way" not in page
