"""``memabra.feedback_app`` mounted on a real ``langgraph dev`` server as docs/production.md says:
``langgraph.json``'s ``http.app`` with ``enable_custom_route_auth`` and a ``langgraph_sdk.Auth``
handler. A run of the served graph logs an episode; its user's thumbs-down, posted to the custom
route with the same token the UI runs the graph with, changes the episode's reward; another user,
or nobody, is refused and nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("langgraph_api", reason="needs LangGraph's Agent Server: pip install 'langgraph-cli[inmem]'")
pytest.importorskip(
    "langgraph_runtime_inmem", reason="needs the Agent Server's in-memory runtime (langgraph-cli[inmem])"
)

from langgraph_sdk import get_sync_client  # noqa: E402
from runtime.agent_server import AgentServer, serve  # noqa: E402

from memabra.storage import EpisodeLog  # noqa: E402

TOKENS = {"ann": "token-of-ann", "bob": "token-of-bob"}

AUTH = f"""
from langgraph_sdk import Auth

auth = Auth()
USERS = {{token: user for user, token in {TOKENS!r}.items()}}


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown token")
    return USERS[token]
"""

# The same process serves the graph and the route: the agent langgraph.json's graph comes from.
WEBAPP = """
from agent_server_app import _agent
from memabra import feedback_app

app = feedback_app(_agent)
"""


def _bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[user]}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    config = {
        "auth": {"path": "./auth.py:auth"},
        "http": {"app": "./webapp.py:app", "enable_custom_route_auth": True},
    }
    yield from serve(
        tmp_path_factory.mktemp("feedback_server"), files={"auth.py": AUTH, "webapp.py": WEBAPP}, config=config
    )


def test_a_users_thumbs_down_over_the_custom_route_changes_the_reward(server: AgentServer) -> None:
    with get_sync_client(url=server.url, headers=_bearer("ann")) as client:
        thread = str(client.threads.create()["thread_id"])
        out = client.runs.wait(
            thread, "served", input={"messages": [{"role": "user", "content": "Hello"}]}, context={"user_id": "ann"}
        )
    assert isinstance(out, dict)
    episode_id = out["memabra_episode_id"]
    route = f"{server.url}/episodes/{episode_id}/feedback"
    with EpisodeLog(server.db_url) as log:
        before = log.get_episode(episode_id)
        assert before.user_id == "ann" and before.reward is not None

        nobody = httpx.post(route, json={"correct": False})
        other = httpx.post(route, json={"correct": False}, headers=_bearer("bob"))
        unknown = httpx.post(
            f"{server.url}/episodes/no-such-episode/feedback", json={"correct": False}, headers=_bearer("bob")
        )
        assert nobody.status_code == 401  # the server's auth handler refused it before the route ran
        assert (
            (other.status_code, other.json())
            == (unknown.status_code, unknown.json())
            == (404, {"detail": "no such episode"})
        )
        assert log.feedback_for(episode_id, include_late=True) == ()

        answer = httpx.post(route, json={"correct": False, "comment": "wrong"}, headers=_bearer("ann"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "stored" and answer.json()["applied"] is True
        after = log.get_episode(episode_id)
        assert after.reward is not None and after.reward.components.s == 0.0
        assert after.reward.total < before.reward.total
        (stored,) = after.feedback
        assert dict(stored.payload) == {"correct": False, "comment": "wrong"} and stored.source == "http"


def test_a_run_routes_for_the_authenticated_user_and_no_one_else(server: AgentServer) -> None:
    """The server's authenticated identity is the run's user: a run that names none routes for it,
    and one that names another user fails, routing nothing (another user's memories stay theirs)."""
    with get_sync_client(url=server.url, headers=_bearer("bob")) as client:
        thread = str(client.threads.create()["thread_id"])
        out = client.runs.wait(thread, "served", input={"messages": [{"role": "user", "content": "Hi there"}]})
        assert isinstance(out, dict)
        with EpisodeLog(server.db_url) as log:
            assert log.get_episode(out["memabra_episode_id"]).user_id == "bob"
            logged = log.count_episodes()
        other = str(client.threads.create()["thread_id"])
        run = client.runs.create(
            other, "served", input={"messages": [{"role": "user", "content": "Hi"}]}, context={"user_id": "ann"}
        )
        client.runs.join(other, run["run_id"])
        assert client.runs.get(other, run["run_id"])["status"] == "error"
    with EpisodeLog(server.db_url) as log:
        assert log.count_episodes() == logged
        assert not [t for t in log.suspended_turns() if t.user_id == "ann"]


def test_another_method_on_the_route_is_refused_405_naming_post_not_404(server: AgentServer) -> None:
    """The server lifts the app's routes into its own, ahead of a mount that takes every path: a
    route that took only POST let a GET fall through to that mount's 404, which a client or proxy
    reads as a wrong URL. The route answers it 405 with ``Allow: POST``, after the server's auth."""
    route = f"{server.url}/episodes/no-such-episode/feedback"
    for method in ("GET", "PUT", "DELETE"):
        answer = httpx.request(method, route, headers=_bearer("ann"))
        assert (answer.status_code, answer.headers.get("allow")) == (405, "POST"), (method, answer.text)
        assert answer.json() == {"detail": "Method Not Allowed"}
    assert httpx.get(route).status_code == 401  # nobody: the server's auth answers first
