"""``memabra.feedback_app``: end users' feedback over HTTP, in process with Starlette's TestClient
over a real log (SQLite and PostgreSQL). A user rates only their own episodes (another's reads as
unknown); bad input, an oversized body, a wrong method or media type are refused naming the
problem, and nothing is stored; a retry under the same ``Idempotency-Key`` is recorded once; the
database work runs off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.tools import tool
from runtime.test_event_loop_stall import SlowLog
from runtime.test_event_loop_stall import slow_fixture as slow_fixture  # noqa: F401 - the fixture slow, shared
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser, UnauthenticatedUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.routing import Mount
from starlette.testclient import TestClient

from memabra import END_USER_FEEDBACK_KEYS, ConfigError, RoutingSession, feedback_app
from memabra._build import build_session
from memabra._feedback_http import MAX_BODY_BYTES
from memabra._records import new_id
from memabra.router import HybridRouter, Similarity
from memabra.storage import DatabaseUnavailableError, EpisodeLog


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def _header_user(request: Request) -> str | None:
    """The test's stand-in for an application's authentication: the user the header names."""
    return request.headers.get("x-user")


@pytest.fixture
def session(log: EpisodeLog) -> Iterator[RoutingSession]:
    s = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    yield s
    s.close()


def _episode(session: RoutingSession, user: str) -> str:
    # a thread of its own: the same question again in one thread would be feedback ("repeat")
    turn = session.begin(user_id=user, query="weather in Lyon?", thread_id=new_id())
    return session.finish(turn.id, "sunny")


@pytest.fixture
def client(session: RoutingSession) -> Iterator[TestClient]:
    with TestClient(feedback_app(session, user=_header_user)) as c:
        yield c


def _post(client: TestClient, episode_id: str, body: Any, user: str | None = "ann", **headers: str) -> httpx.Response:
    if user is not None:
        headers["x-user"] = user
    return client.post(f"/episodes/{episode_id}/feedback", json=body, headers=headers)


def _stored(log: EpisodeLog, episode_id: str) -> tuple[Any, ...]:
    return log.feedback_for(episode_id, include_late=True)


def test_a_users_rating_of_their_episode_is_stored_and_changes_the_reward(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")
    before = log.get_reward(episode_id)
    answer = _post(client, episode_id, {"rating": 1, "comment": "useless"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # one shape for every answer: retired_memory is there (null) where nothing was retracted
    assert body == {
        "episode_id": episode_id,
        "feedback_id": body["feedback_id"],
        "status": "stored",
        "applied": True,
        "retired_memory": None,
    }
    (stored,) = _stored(log, episode_id)
    assert (stored.id, stored.source, dict(stored.payload)) == (
        body["feedback_id"],
        "http",
        {"rating": 1, "comment": "useless"},
    )
    after = log.get_reward(episode_id)
    assert before is not None and after is not None
    assert (before.components.s, after.components.s) == (0.5, 0.0) and after.total < before.total


def test_a_correction_and_a_wrong_tool_reach_the_reward(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")
    assert _post(client, episode_id, {"correction": "I'm in Paris now", "tool_wrong": "get_weather"}).status_code == 200
    reward = log.get_reward(episode_id)
    assert reward is not None and reward.components.c == 1.0 and reward.components.e > 0
    assert log.get_episode(episode_id).feedback[0].signals.corrects


def test_nobody_is_refused_401_and_the_default_is_never_anonymous(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")
    answer = _post(client, episode_id, {"correct": False}, user=None)
    assert (answer.status_code, answer.json()) == (401, {"detail": "authentication required"})
    # The default reads the server's authenticated user: no authentication at all is nobody.
    with TestClient(feedback_app(session)) as bare:
        assert _post(bare, episode_id, {"correct": False}, user=None).status_code == 401
    assert _stored(log, episode_id) == ()


class _IdentityUser(BaseUser):
    """What LangGraph's Agent Server puts on a custom route's request: a user with an ``identity``."""

    def __init__(self, identity: str) -> None:
        self._identity = identity

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.identity


class _TokenBackend(AuthenticationBackend):
    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser]:
        token = conn.headers.get("authorization", "")
        user: BaseUser = _IdentityUser(token.removeprefix("Bearer ")) if token else UnauthenticatedUser()
        return AuthCredentials(["authenticated"] if token else []), user


def test_the_default_user_is_the_authenticated_identity_mounted_in_another_app(
    session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")
    outer = Starlette(
        routes=[Mount("/memabra", feedback_app(session))],
        middleware=[Middleware(AuthenticationMiddleware, backend=_TokenBackend())],
    )
    route = f"/memabra/episodes/{episode_id}/feedback"
    with TestClient(outer) as c:
        assert c.post(route, json={"correct": True}).status_code == 401  # an UnauthenticatedUser
        assert c.post(route, json={"correct": True}, headers={"authorization": "Bearer bob"}).status_code == 404
        assert c.post(route, json={"correct": True}, headers={"authorization": "Bearer ann"}).status_code == 200
    assert [dict(f.payload) for f in _stored(log, episode_id)] == [{"correct": True}]


def test_another_users_episode_reads_exactly_as_an_unknown_one(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")
    others = _post(client, episode_id, {"correct": True}, user="bob")
    unknown = _post(client, "no-such-episode", {"correct": True}, user="bob")
    too_long = _post(client, "x" * 500, {"correct": True}, user="bob")
    assert others.status_code == unknown.status_code == too_long.status_code == 404
    assert others.content == unknown.content == too_long.content == b'{"detail":"no such episode"}'
    assert _stored(log, episode_id) == ()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ([{"rating": 1}], "must be a JSON object"),
        ("thumbs down", "must be a JSON object"),
        ({"ratting": 1}, "unknown feedback key 'ratting'"),
        ({"rating": 9}, "feedback 'rating' must be an integer from 1 to 5"),
        ({"correct": "no"}, "feedback 'correct' must be true or false"),
        ({"final": True}, "feedback key 'final' is not one an end user may send"),
        ({"rating": 2, "relevant_ids": ["m1"]}, "feedback key 'relevant_ids' is not one an end user may send"),
        ({"gold_answer": "x", "success": 1}, "feedback key 'gold_answer', 'success' is not one"),
        ({}, "carries no signal"),
    ],
)
def test_bad_feedback_is_refused_400_naming_the_key_and_nothing_is_stored(
    client: TestClient, session: RoutingSession, log: EpisodeLog, body: Any, named: str
) -> None:
    episode_id = _episode(session, "ann")
    answer = _post(client, episode_id, body)
    assert answer.status_code == 400 and named in answer.json()["detail"], answer.text
    assert _stored(log, episode_id) == ()


@pytest.mark.parametrize(
    "raw", [b"{not json", b'{"rating": NaN}', b"\xff\xfe", b"[" * 5000, b'{"rating": 1}{"rating": 5}']
)
def test_a_body_that_is_no_json_is_refused_400(client: TestClient, session: RoutingSession, raw: bytes) -> None:
    episode_id = _episode(session, "ann")
    answer = client.post(
        f"/episodes/{episode_id}/feedback", content=raw, headers={"x-user": "ann", "content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    assert session.log.feedback_for(episode_id, include_late=True) == ()


def test_an_oversized_body_is_refused_413_declared_or_streamed(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")
    big = {"comment": "x" * MAX_BODY_BYTES}
    assert _post(client, episode_id, big).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: read in chunks, refused once over the limit
        yield b'{"comment": "'
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b"x" * 1024
        yield b'"}'

    url = f"/episodes/{episode_id}/feedback"
    streamed = client.post(url, content=chunks(), headers={"x-user": "ann", "content-type": "application/json"})
    assert streamed.status_code == 413 and str(MAX_BODY_BYTES) in streamed.json()["detail"]
    assert _post(client, episode_id, {"comment": "x" * (MAX_BODY_BYTES - 100)}).status_code == 200  # under it
    assert [len(str(f.payload["comment"])) for f in _stored(log, episode_id)] == [MAX_BODY_BYTES - 100]


def test_a_wrong_method_or_media_type_is_refused_and_nothing_is_stored(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")
    url = f"/episodes/{episode_id}/feedback"
    for method in ("GET", "PUT", "DELETE"):
        answer = client.request(method, url, headers={"x-user": "ann"})
        assert answer.status_code == 405 and answer.headers["allow"] == "POST", method
        assert answer.json() == {"detail": "Method Not Allowed"}
    # a cross-site form can send this type without a CORS preflight: refused
    form = client.post(url, content=b'{"correct": false}', headers={"x-user": "ann", "content-type": "text/plain"})
    assert form.status_code == 415
    assert _stored(log, episode_id) == ()


def test_a_retry_under_the_same_idempotency_key_is_recorded_once(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id, other = _episode(session, "ann"), _episode(session, "ann")
    key = {"idempotency-key": "9b2f6d1e-thumbs"}
    first = _post(client, episode_id, {"tool_wrong": True}, **key)
    retry = _post(client, episode_id, {"tool_wrong": True}, **key)
    assert (first.json()["status"], retry.json()["status"]) == ("stored", "duplicate")
    assert retry.json()["feedback_id"] == first.json()["feedback_id"]
    changed = _post(client, episode_id, {"tool_wrong": False}, **key)
    assert changed.status_code == 409 and "first feedback stands" in changed.json()["detail"]
    assert [dict(f.payload) for f in _stored(log, episode_id)] == [{"tool_wrong": True}]
    # the key is the client's for this episode only: the same on another episode is new feedback
    assert _post(client, other, {"tool_wrong": True}, **key).json()["status"] == "stored"
    # without a key each post is one more feedback: the latest verdict wins
    assert _post(client, other, {"correct": True}).json()["status"] == "stored"
    assert len(_stored(log, other)) == 2
    reward = log.get_reward(other)
    assert reward is not None and reward.components.s == 1.0


@pytest.mark.parametrize("key", ["", "k" * 201, "two words", "caf\u00e9"])
def test_a_malformed_idempotency_key_is_refused_400(client: TestClient, session: RoutingSession, key: str) -> None:
    episode_id = _episode(session, "ann")
    answer = client.post(
        f"/episodes/{episode_id}/feedback",
        content=b'{"correct": true}',
        headers={"x-user": "ann", "content-type": "application/json", "idempotency-key": key.encode("utf-8")},  # type: ignore[dict-item]
    )
    assert answer.status_code == 400 and "Idempotency-Key" in answer.json()["detail"]
    assert session.log.feedback_for(episode_id, include_late=True) == ()


def test_an_application_may_widen_the_keys_and_resolve_the_user_asynchronously(
    session: RoutingSession, log: EpisodeLog
) -> None:
    episode_id = _episode(session, "ann")

    async def user(request: Request) -> str | None:
        await asyncio.sleep(0)
        return request.headers.get("x-user")

    app = feedback_app(session, user=user, keys=END_USER_FEEDBACK_KEYS | {"final"}, source="chat-ui")
    with TestClient(app) as c:
        assert _post(c, episode_id, {"correct": True, "final": True}).json()["status"] == "stored"
    assert log.get_episode(episode_id).finalized_at is not None
    assert [f.source for f in _stored(log, episode_id)] == ["chat-ui"]


def test_a_misconfigured_app_is_refused_when_built(session: RoutingSession) -> None:
    with pytest.raises(ConfigError, match="names no feedback key: thumbs"):
        feedback_app(session, keys={"rating", "thumbs"})
    with pytest.raises(ConfigError, match="empty"):
        feedback_app(session, keys=())
    with pytest.raises(TypeError, match="MemabraAgent or a RoutingSession"):
        feedback_app(session.log)  # type: ignore[arg-type]


def test_the_database_work_runs_off_the_event_loop(session: RoutingSession, log: EpisodeLog, slow: SlowLog) -> None:
    episodes = [_episode(session, "ann") for _ in range(3)]
    app = feedback_app(session, user=_header_user)

    async def post_all() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://memabra") as c:
            answers = await asyncio.gather(
                *(c.post(f"/episodes/{e}/feedback", json={"rating": 5}, headers={"x-user": "ann"}) for e in episodes)
            )
        return [a.status_code for a in answers]

    statuses, worst = slow.measure(post_all)
    assert statuses == [200, 200, 200]
    slow.assert_loop_free(worst)


def test_a_log_that_cannot_be_reached_answers_503_and_a_retry_is_recorded_once(
    client: TestClient, session: RoutingSession, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outage (or a failover) is the client's to retry, not a 500: the answer says so, and the
    retry under the same Idempotency-Key, once the log is back, is recorded once."""
    episode_id = _episode(session, "ann")
    real = EpisodeLog.get_episode

    def down(self: EpisodeLog, *args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailableError("could not connect to the episode log: connection refused")

    monkeypatch.setattr(EpisodeLog, "get_episode", down)
    refused = _post(client, episode_id, {"correct": False}, **{"Idempotency-Key": "ui-event-7"})
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert "retry later with the same Idempotency-Key" in refused.json()["detail"]
    monkeypatch.setattr(EpisodeLog, "get_episode", real)
    assert _stored(log, episode_id) == ()
    for _ in range(2):
        assert _post(client, episode_id, {"correct": False}, **{"Idempotency-Key": "ui-event-7"}).status_code == 200
    assert len(_stored(log, episode_id)) == 1


def test_a_method_http_does_not_name_is_refused_405_allowing_post_only(
    client: TestClient, session: RoutingSession, log: EpisodeLog
) -> None:
    """A WebDAV or made-up method is refused by Starlette itself: its ``Allow`` header listed
    every method the route is registered for (GET, PUT, DELETE...), which the route refuses."""
    episode_id = _episode(session, "ann")
    url = f"/episodes/{episode_id}/feedback"
    for method in ("PROPFIND", "PURGE"):
        answer = client.request(method, url, headers={"x-user": "ann"})
        assert (answer.status_code, answer.headers.get("allow")) == (405, "POST"), method
        assert answer.json() == {"detail": "Method Not Allowed"}
    assert _stored(log, episode_id) == ()
