"""The status counts the turns that failed in its window, by cause, for an alert to see: a provider
outage (``model_error``), users pressing stop (``superseded``). ``EpisodeLog.status()``, ``memabra
status`` (text, ``--json``, ``--prometheus``) and the admin's ``GET /metrics``, on SQLite and
PostgreSQL, with turns the runtime itself logged as failed."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from foundation.test_metrics import parse_exposition, value
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.errors import GraphRecursionError
from runtime.conftest import get_weather
from runtime.test_failed_turn_listing import USER, _reply
from starlette.testclient import TestClient
from typer.testing import CliRunner

from factories import episode
from fakes import ScriptedChatModel
from memabra import Feedback, FeedbackKind, MemabraAgent
from memabra._admin import create_app
from memabra._agent import build_session
from memabra._cli import app
from memabra._feedback import RewardService
from memabra._graph_steps import FAILED_TURN_SOURCE
from memabra._middleware import MemabraMiddleware
from memabra._paused_turns import ABANDONED_SOURCE
from memabra._records import utcnow
from memabra._superseded import SUPERSEDED_REASON
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeFilter, EpisodeLog
from memabra.storage._status import FAILED_TURNS_WINDOW, log_status

runner = CliRunner(env={"COLUMNS": "200"})
CAUSES = ("recursion_limit", "model_error", "tool_error", "superseded", "other")
NONE = dict.fromkeys(CAUSES, 0)
TOKEN = "status-token"


def _fail_turns(log: EpisodeLog) -> None:
    """Turns the runtime logs as failed: two provider errors, a run out of steps, a tool that
    raised; and one turn that went well."""
    session = build_session(tools=[get_weather], db=log, router=HybridRouter(similarity=Similarity(encoder=None)))
    model = ScriptedChatModel(replies=[_reply] * 50)
    agent = MemabraAgent(create_agent(model, tools=[get_weather], middleware=[MemabraMiddleware(session)]), session)

    def ask(text: str, thread: str, **config: Any) -> None:
        agent.invoke(
            {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}, **config}, context=USER
        )

    for thread in ("model-1", "model-2"):
        with pytest.raises(RuntimeError):
            ask("is the provider up?", thread)
    with pytest.raises(GraphRecursionError):
        ask("loop on the weather", "steps", recursion_limit=6)
    with pytest.raises(ValueError, match="city is required"):
        ask("weather in blank?", "tool")
    ask("weather in Lyon?", "fine")


def _log_failed(
    log: EpisodeLog, comment: str | None, *, ago: timedelta = timedelta(0), source: str = FAILED_TURN_SOURCE
) -> None:
    at = utcnow() - ago
    ep = episode("bob", created_at=at)
    payload: dict[str, object] = {"accepted": False, **({"comment": comment} if comment is not None else {})}
    RewardService(log).record(
        replace(ep, feedback=(Feedback(ep.id, FeedbackKind.PROGRAMMATIC, source, payload, received_at=at),))
    )


def _fill(log: EpisodeLog) -> None:
    _fail_turns(log)
    _log_failed(log, SUPERSEDED_REASON)  # a new message on the thread before the turn finished
    _log_failed(log, None)  # failed with no model or tool call to blame
    _log_failed(log, None, source=ABANDONED_SOURCE)  # not counted: a paused turn an operator abandoned


EXPECTED = {"recursion_limit": 1, "model_error": 2, "tool_error": 1, "superseded": 1, "other": 1}


def test_the_status_counts_the_windows_failed_turns_by_cause(log: EpisodeLog) -> None:
    assert dict(log.status().failed_turns) == NONE
    _fill(log)
    _log_failed(log, SUPERSEDED_REASON, ago=FAILED_TURNS_WINDOW + timedelta(minutes=5))  # before the window
    state = log.status()
    assert dict(state.failed_turns) == EXPECTED
    assert state.failed_since == state.checked_at - FAILED_TURNS_WINDOW
    # the listing finds the same turns (its since: the window's start)
    since = state.failed_since
    for cause in ("recursion_limit", "model_error", "tool_error", "superseded"):
        listed = log.list_episodes(EpisodeFilter(failure_cause=cause, since=since)).items
        assert len(listed) == EXPECTED[cause], cause
    # an hour on, the window holds none of them: the count falls back to 0 (an alert resolves)
    assert dict(log_status(log.engine, utcnow() + FAILED_TURNS_WINDOW + timedelta(minutes=1)).failed_turns) == NONE


def _status_json(url: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    out = runner.invoke(app, ["status", "--db", url, "--json", "-"])
    return out.exit_code, out.output, json.loads(out.stdout[out.stdout.index("{") :])


def test_memabra_status_shows_them_in_text_and_json(migrated_url: str, log: EpisodeLog) -> None:
    code, output, document = _status_json(migrated_url)
    assert code == 0, output
    assert "failed    no turn in the last 1h" in output
    assert document["status"]["failed_turns"] == NONE
    _fill(log)
    code, output, document = _status_json(migrated_url)
    assert code == 0, output  # no failure is a health problem by itself: the alert on the count decides
    assert document["status"]["failed_turns"] == EXPECTED
    assert document["status"]["failed_since"] < document["status"]["checked_at"]
    line = next(line for line in output.splitlines() if line.startswith("failed"))
    assert "6 turn(s) in the last 1h: recursion_limit 1, model_error 2, tool_error 1, superseded 1, other 1" in line
    assert "`memabra episodes list --failed --since " in line


def test_prometheus_has_every_cause_always_and_the_window(migrated_url: str, log: EpisodeLog, tmp_path: Path) -> None:
    out = tmp_path / "memabra.prom"
    assert runner.invoke(app, ["status", "--db", migrated_url, "--prometheus", str(out)]).exit_code == 0
    families = parse_exposition(out.read_text())
    for cause in CAUSES:  # 0 when none: `memabra_failed_turns{cause="model_error"} > 20` needs no absent()
        assert value(families, "memabra_failed_turns", cause=cause) == 0
    assert value(families, "memabra_failed_turns_window_seconds") == 3600
    assert families["memabra_failed_turns"].kind == "gauge"
    _fill(log)
    with TestClient(create_app(log, token=TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        scraped = client.get("/metrics")
    assert scraped.status_code == 200
    families = parse_exposition(scraped.text)
    assert {cause: value(families, "memabra_failed_turns", cause=cause) for cause in CAUSES} == EXPECTED
    assert value(families, "memabra_status_healthy") == 1
