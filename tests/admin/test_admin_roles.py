"""Roles: an operator (``MEMABRA_ADMIN_TOKEN`` / ``_PASSWORD``) may write; a reviewer
(``MEMABRA_ADMIN_REVIEWER_TOKEN`` / ``_PASSWORD``) sees every page, finds no write control on any,
and is refused every write with 403 naming the role, signed in or by bearer token. The role rides
in the signed cookie; a cookie signed before roles reads as the operator session it was."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from itsdangerous import URLSafeSerializer
from starlette.testclient import TestClient
from typer import Typer
from typer.testing import CliRunner

from factories import readable_final_rewards
from memabra import PolicySnapshot, SQLMemory
from memabra._admin import ActiveSnapshotPolicy, Credentials, Role, create_app
from memabra._admin._auth import SESSION_COOKIE, SessionCodec, SessionState, SignIn
from memabra._cli._admin import admin
from memabra._errors import ConfigError
from memabra.storage import EpisodeLog, LearnerStore
from memabra.storage._learner import START
from memabra.storage._snapshot_audit import status_history

from .conftest import PASSWORD, TOKEN, ClientFactory, Seeded, csrf_of, sign_in
from .test_admin_memories import Memories, seed_memories
from .test_admin_turns import kept_turn

REVIEWER_TOKEN = "reviewer-token-9876543210"
REVIEWER_PASSWORD = "product people look, never touch"
SECRET_KEY = b"k" * 32
REFUSAL = "Signed in as a reviewer: "


@dataclass
class World:
    seeded: Seeded
    memories: Memories
    episode: str
    turn_episode: str


@pytest.fixture(name="world")
def world_fixture(log: EpisodeLog, seeded: Seeded) -> World:
    """Something for every write to change: an open episode, memories (one retired), a paused
    turn, and the learner checkpoint of a policy no longer served."""
    memories = seed_memories(log)
    turn = kept_turn("t-paused", state="paused")
    log.suspend_turn(turn)
    finals = readable_final_rewards(LearnerStore(log.engine))
    LearnerStore(log.engine).commit(
        PolicySnapshot("gone", "gone-1", b"model"), previous=START, position=finals[0].position, learned=1
    )
    return World(seeded, memories, seeded.episodes[10], turn.episode_id)


def _app(log: EpisodeLog, **kwargs: Any) -> Any:
    kwargs.setdefault("token", TOKEN)
    kwargs.setdefault("reviewer_token", REVIEWER_TOKEN)
    kwargs.setdefault("reviewer_password", REVIEWER_PASSWORD)
    return create_app(log, current_policy=ActiveSnapshotPolicy(log, "test"), **kwargs)


def _client(make_client: ClientFactory, log: EpisodeLog, secret: str = REVIEWER_TOKEN, **kwargs: Any) -> TestClient:
    client = make_client(
        signed_in=False,
        reviewer_token=REVIEWER_TOKEN,
        reviewer_password=REVIEWER_PASSWORD,
        current_policy=ActiveSnapshotPolicy(log, "test"),
        **kwargs,
    )
    assert sign_in(client, secret).status_code == 303
    return client


# Every write route of the app, with what an operator would send to it.
WRITES: dict[str, Any] = {
    "/episodes/{id}/feedback": lambda w: {"action": "rating", "rating": "4", "idempotency_key": "rv-1"},
    "/episodes/{id}/delete": lambda w: {},
    "/erase": lambda w: {"user": "ann", "confirm": "ann"},
    "/policies/promote": lambda w: {"version": "test-v3"},
    "/policies/rollback": lambda w: {"version": "test-v2"},
    "/policies/forget-learner": lambda w: {"policy": "gone"},
    "/turns/abandon": lambda w: {"turn_id": "t-paused", "episode_id": w.turn_episode},
    "/memories/update": lambda w: {"user": "ann", "memory_id": w.memories.helpful, "text": "I drink coffee"},
    "/memories/retire": lambda w: {"user": "ann", "memory_id": w.memories.helpful},
    "/memories/restore": lambda w: {"user": "ann", "memory_id": w.memories.retired, "replace": "on"},
}


def _path(route: str, world: World) -> str:
    return route.replace("{id}", quote(world.episode, safe=""))


def _state(log: EpisodeLog, world: World) -> tuple[object, ...]:
    memory = SQLMemory(log)
    episode = log.get_episode(world.episode)  # raises once deleted
    return (
        episode.feedback,
        [log.get_snapshot(v).status for v in ("test-v1", "test-v2", "test-v3")],
        LearnerStore(log.engine).checkpoint("gone") is not None,
        log.suspended_turn("t-paused") is not None,
        [
            (r.text, r.status)
            for r in (memory.get("ann", world.memories.helpful), memory.get("ann", world.memories.retired))
        ],
    )


def test_the_write_table_covers_every_write_route(log: EpisodeLog) -> None:
    app = _app(log)
    posts = {
        route.path.replace("{episode_id:path}", "{id}")
        for route in app.routes
        if "POST" in (getattr(route, "methods", None) or ())
    }
    assert posts - {"/login", "/logout"} == set(WRITES)


@pytest.mark.parametrize("route", sorted(WRITES))
def test_a_reviewer_session_is_refused_every_write(
    make_client: ClientFactory, log: EpisodeLog, world: World, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(make_client, log)
    token = csrf_of(client.get("/episodes").text)
    before = _state(log, world)
    caplog.set_level(logging.WARNING, "memabra")
    response = client.post(_path(route, world), data={"csrf_token": token, **WRITES[route](world)})
    assert response.status_code == 403, response.text
    assert REFUSAL in response.text and "change nothing" in response.text
    assert _state(log, world) == before
    assert "refused POST" in caplog.text and "reviewer token sign-in" in caplog.text


@pytest.mark.parametrize("route", sorted(WRITES))
def test_a_reviewer_bearer_token_is_refused_every_write(log: EpisodeLog, world: World, route: str) -> None:
    with TestClient(_app(log), follow_redirects=False) as client:
        before = _state(log, world)
        bearer = {"Authorization": f"Bearer {REVIEWER_TOKEN}"}
        assert client.get("/policies", headers=bearer).status_code == 200  # it reads
        response = client.post(_path(route, world), data=WRITES[route](world), headers=bearer)
        assert response.status_code == 403 and REFUSAL in response.text
        assert _state(log, world) == before


def test_bearer_roles(log: EpisodeLog, world: World) -> None:
    with TestClient(_app(log), follow_redirects=False) as client:
        # a reviewer's password is for the sign-in form, as the operator's is
        password = client.get("/episodes", headers={"Authorization": f"Bearer {REVIEWER_PASSWORD}"})
        assert password.status_code == 401
        page = client.get(f"/episodes/{world.episode}", headers={"Authorization": f"Bearer {REVIEWER_TOKEN}"}).text
        assert 'id="rating-form"' not in page and 'id="role-badge"' in page
        promoted = client.post(
            "/policies/promote", data={"version": "test-v3"}, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert promoted.status_code == 303 and log.get_snapshot("test-v3").status == "active"
        assert status_history(log.get_snapshot("test-v3").metrics)[-1].by == "operator bearer token"


def _forms(page: str) -> list[str]:
    return re.findall(r'<form method="post" action="([^"]+)"', page)


def test_a_reviewer_sees_every_page_without_write_controls(
    make_client: ClientFactory, log: EpisodeLog, world: World
) -> None:
    pages = [
        f"/episodes/{world.episode}",
        "/episodes",
        "/policies",
        "/turns",
        "/memories?user=ann",
        f"/memories/item?user=ann&id={world.memories.helpful}",
        f"/memories/item?user=ann&id={world.memories.retired}",
        "/deletions",
    ]
    operator = make_client(current_policy=ActiveSnapshotPolicy(log, "test"), reviewer_token=REVIEWER_TOKEN)
    reviewer = _client(make_client, log, REVIEWER_PASSWORD)
    for url in pages:
        seen = reviewer.get(url)
        assert seen.status_code == 200, (url, seen.text)
        assert _forms(seen.text) == ["/logout"], url  # signing out is the one thing a reviewer posts
        assert 'id="role-badge"' in seen.text and ">read-only<" not in seen.text
        assert 'id="role-badge"' not in operator.get(url).text
    # what the operator has there, the reviewer has not
    operator_forms = {form for url in pages for form in _forms(operator.get(url).text)}
    assert set(WRITES) <= {re.sub(r"^/episodes/[^/]+/", "/episodes/{id}/", f) for f in operator_forms}
    assert f"{REFUSAL}feedback cannot be recorded here." in reviewer.get(f"/episodes/{world.episode}").text
    memory_page = reviewer.get(f"/memories/item?user=ann&id={world.memories.helpful}").text
    assert f"{REFUSAL}memories cannot be changed here." in memory_page


def test_a_read_only_app_still_says_read_only_to_an_operator(make_client: ClientFactory, world: World) -> None:
    client = make_client(read_only=True, reviewer_token=REVIEWER_TOKEN)
    page = client.get(f"/episodes/{world.episode}").text
    assert ">read-only<" in page and "Read-only: feedback cannot be recorded here." in page
    assert 'id="role-badge"' not in page


def test_reviewer_credentials_equal_to_an_operator_one_are_a_config_error(log: EpisodeLog) -> None:
    cases = [
        ({"token": TOKEN, "reviewer_token": TOKEN}, "reviewer token equals the operator token"),
        ({"token": TOKEN, "reviewer_password": TOKEN}, "reviewer password equals the operator token"),
        ({"password": PASSWORD, "reviewer_token": PASSWORD}, "reviewer token equals the operator password"),
        ({"token": TOKEN, "password": PASSWORD, "reviewer_password": PASSWORD}, "reviewer password equals"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            create_app(log, **kwargs)
    with pytest.raises(ConfigError, match="reviewer token must be a text of at least 8"):
        Credentials(token=TOKEN, reviewer_token="short")
    with pytest.raises(ConfigError, match="token or a password"):
        Credentials(reviewer_token=REVIEWER_TOKEN)  # someone must be able to make changes
    creds = Credentials(token=TOKEN, reviewer_token=REVIEWER_TOKEN, reviewer_password=REVIEWER_PASSWORD)
    assert [creds.principal_of(s) for s in (TOKEN, REVIEWER_TOKEN, REVIEWER_PASSWORD, "nope-nope")] == [
        SignIn(Role.OPERATOR, "token"),
        SignIn(Role.REVIEWER, "token"),
        SignIn(Role.REVIEWER, "password"),
        None,
    ]
    assert creds.bearer_role(REVIEWER_TOKEN) is Role.REVIEWER and creds.bearer_role(REVIEWER_PASSWORD) is None
    assert creds.accepts_bearer(TOKEN) and not creds.accepts_bearer(REVIEWER_TOKEN)


def test_cli_refuses_a_reviewer_token_equal_to_the_operator_token(
    monkeypatch: pytest.MonkeyPatch, log: EpisodeLog
) -> None:
    monkeypatch.setenv("MEMABRA_ADMIN_TOKEN", TOKEN)
    monkeypatch.setenv("MEMABRA_ADMIN_REVIEWER_TOKEN", TOKEN)
    app = Typer()
    app.command()(admin)
    url = log.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(app, ["--db", url, "--port", "1"])
    assert result.exit_code == 1
    assert "reviewer token equals the operator token" in result.output


def _old_cookie(**payload: Any) -> str:
    """A cookie as the admin signed it before roles (the old salt, no role)."""
    data = {"a": True, "c": "old-csrf-token-value", "e": time.time() + 3600, "i": "old-session-id", **payload}
    return URLSafeSerializer(SECRET_KEY, salt="memabra-admin-session").dumps(data)


def test_a_cookie_signed_before_roles_is_an_operator_session(log: EpisodeLog, world: World) -> None:
    with TestClient(_app(log, secret_key=SECRET_KEY), follow_redirects=False) as client:
        client.cookies.set(SESSION_COOKIE, _old_cookie(p="token"))
        page = client.get(f"/episodes/{world.episode}").text
        assert 'id="rating-form"' in page and 'id="role-badge"' not in page
        promoted = client.post("/policies/promote", data={"csrf_token": "old-csrf-token-value", "version": "test-v3"})
        assert promoted.status_code == 303, promoted.text
        assert status_history(log.get_snapshot("test-v3").metrics)[-1].by == "operator token sign-in"


def test_a_role_cannot_be_dropped_or_invented() -> None:
    codec = SessionCodec(SECRET_KEY, timedelta(hours=1))
    cookie, session = codec.issue(authenticated=True, principal="token", role=Role.REVIEWER)
    assert codec.read(cookie)[1] == session and session.role is Role.REVIEWER
    current = URLSafeSerializer(SECRET_KEY, salt="memabra-admin-session-v2")
    data = current.loads(cookie)
    for forged in ({k: v for k, v in data.items() if k != "r"}, {**data, "r": "admin"}):
        assert codec.read(current.dumps(forged)) == (SessionState.INVALID, None)
    # a role is signed: changing it without the key breaks the signature
    signature = cookie.rsplit(".", 1)[1]
    tampered = current.dumps({**data, "r": "operator"}).rsplit(".", 1)[0] + "." + signature
    assert codec.read(tampered)[0] is SessionState.INVALID
    # an old-salt cookie never becomes a reviewer one, whatever it says
    assert codec.read(_old_cookie(r="reviewer"))[1].role is Role.OPERATOR  # type: ignore[union-attr]
