"""docs/production.md's deployment files, copied as a reader copies them (``agent.py``,
``webapp.py``, ``auth.py`` and the ``langgraph.json`` with ``http.app``), served by a real
``langgraph dev``: the server starts, a run as the token's user logs an episode, and the feedback
route takes that user's rating once under a retried ``Idempotency-Key``. ``agent.py`` is imported
once: a second import would build a second agent (its own pool and in-process learner) for the
route. The only line added to the page's files records each import of ``agent.py``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("langgraph_api", reason="needs LangGraph's Agent Server: pip install 'langgraph-cli[inmem]'")
pytest.importorskip(
    "langgraph_runtime_inmem", reason="needs the Agent Server's in-memory runtime (langgraph-cli[inmem])"
)

from docs.test_docs_examples import DOCS, blocks_of  # noqa: E402
from langgraph_sdk import get_sync_client  # noqa: E402
from runtime.agent_server import AgentServer, run_dev_server  # noqa: E402

PAGE = DOCS / "production.md"
TOKEN = "token-of-ann"  # the page's auth.py table


def _deployment_files() -> dict[str, str]:
    """The page's blocks that are files of the deployment, by the name their first line gives
    (``# agent.py``) or, for the configuration, the one ``langgraph.json`` naming ``http.app``."""
    files: dict[str, str] = {}
    for block in blocks_of(PAGE):
        first = block.source.lstrip().split("\n", 1)[0]
        if block.language == "python" and first.startswith("# ") and first[2:].split(":")[0].endswith(".py"):
            files[first[2:].split(":")[0]] = block.source
        elif block.language == "json" and '"http"' in block.source:
            files["langgraph.json"] = block.source
    missing = {"agent.py", "webapp.py", "auth.py", "langgraph.json"} - set(files)
    assert not missing, f"{PAGE.name} no longer shows {sorted(missing)}"
    return files


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AgentServer, Path]]:
    root = tmp_path_factory.mktemp("deployment")
    app = root / "app"
    app.mkdir()
    imports = root / "agent_imports.txt"
    for name, text in _deployment_files().items():
        (app / name).write_text(text)
    with (app / "agent.py").open("a") as agent:
        agent.write(f"\nwith open({str(imports)!r}, 'a') as _f:\n    _f.write(__name__ + '\\n')\n")
    json.loads((app / "langgraph.json").read_text())  # a reader's copy must parse
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMABRA_DATABASE_URL")}
    for server in run_dev_server(app, f"sqlite:///{app / 'memabra.db'}", env, root / "server.log"):
        yield server, imports


def test_the_pages_deployment_serves_runs_and_feedback_with_one_agent(
    deployment: tuple[AgentServer, Path],
) -> None:
    server, imports = deployment
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with get_sync_client(url=server.url, headers=bearer) as client:
        thread = str(client.threads.create()["thread_id"])
        out = client.runs.wait(thread, "memabra", input={"messages": [{"role": "user", "content": "Hello"}]})
    assert isinstance(out, dict), out
    episode_id = out["memabra_episode_id"]
    route = f"{server.url}/episodes/{episode_id}/feedback"
    retried = {**bearer, "Idempotency-Key": "click-1"}
    first = httpx.post(route, json={"correct": False}, headers=retried)
    again = httpx.post(route, json={"correct": False}, headers=retried)
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert (first.json()["status"], again.json()["status"]) == ("stored", "duplicate")
    assert httpx.post(route, json={"correct": False}).status_code == 401
    assert imports.read_text().split() == ["agent"], "agent.py was imported more than once: two agents"
