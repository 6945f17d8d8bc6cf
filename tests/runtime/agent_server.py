"""A real ``langgraph dev`` server (LangGraph's Agent Server, in-memory runtime) serving
``agent_server_app.py``'s graphs, for the tests that drive a memabra agent through the
``langgraph_sdk`` client as a deployment does. One server per test module: start-up takes seconds."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
START_TIMEOUT_S = 90.0  # the first start imports langgraph_api and memabra, and compiles the graphs
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class AgentServer:
    url: str
    db_url: str
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli() -> str:
    beside = Path(sys.executable).parent / "langgraph"
    found = str(beside) if beside.exists() else shutil.which("langgraph")
    if found is None:
        raise RuntimeError("langgraph-cli is importable but its `langgraph` command is not on PATH")
    return found


def serve(
    root: Path, *, files: Mapping[str, str] | None = None, config: Mapping[str, object] | None = None
) -> Iterator[AgentServer]:
    """Start ``langgraph dev`` on a free port over an app in ``root/app`` and a SQLite log in
    ``root/db`` (outside the app folder, as a reloader would watch it); stop it afterwards.
    ``files``: more files for the app folder (name: text, e.g. a custom route's ``webapp.py``);
    ``config``: more ``langgraph.json`` keys (``http``, ``auth``)."""
    app, db = root / "app", root / "db"
    app.mkdir()
    db.mkdir()
    (app / "app.py").write_text("from agent_server_app import approvals, plain, served  # noqa: F401\n")
    for name, text in (files or {}).items():
        (app / name).write_text(text)
    graphs = {name: f"./app.py:{name}" for name in ("served", "plain", "approvals")}
    (app / "langgraph.json").write_text(json.dumps({"dependencies": ["."], "graphs": graphs, **(config or {})}))
    db_url = f"sqlite:///{db / 'memabra.db'}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        "AGENT_SERVER_TEST_DB": db_url,
    }
    yield from run_dev_server(app, db_url, env, root / "server.log")


def run_dev_server(app: Path, db_url: str, env: Mapping[str, str], log_path: Path) -> Iterator[AgentServer]:
    """``langgraph dev`` over the app folder ``app`` (its ``langgraph.json``) on a free port, with
    ``env`` (tracing and analytics off), its output in ``log_path``; stopped afterwards."""
    port = _free_port()
    quiet = {**env, "LANGSMITH_TRACING": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [_cli(), "dev", "--no-browser", "--no-reload", "--port", str(port), "--config", "langgraph.json"],
            cwd=app,
            env=quiet,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = AgentServer(f"http://127.0.0.1:{port}", db_url, log_path)
    try:
        _wait_ready(server, proc)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(server: AgentServer, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"langgraph dev exited with {proc.returncode}:\n{server.output()[-4000:]}")
        try:
            if httpx.get(f"{server.url}/ok", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"langgraph dev did not answer in {START_TIMEOUT_S}s:\n{server.output()[-4000:]}")
