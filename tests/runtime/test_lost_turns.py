"""A process killed mid-turn, after routing and before logging: its routing decision is kept in the
log from the moment it was made. A run retried from its checkpoint in another process goes on with
that decision (one episode, the same draws); a turn nobody retries is shown as lost and logged as a
failed episode by ``memabra episodes paused --lost --abandon``, so offline evaluation keeps it.

The episode log and the checkpoints share one SQLite file's directory, or one PostgreSQL schema
(``MEMABRA_TEST_DATABASE_URL``). This file is also the worker: ``python test_lost_turns.py LOG_URL
CHECKPOINTS PHASE`` (phase ``die``: the model call kills the process; ``retry``: the run goes on)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mail_agent import mail_agent
from savers import checkpoints_for, sync_saver
from typer.testing import CliRunner

HERE = Path(__file__).parent
CONFIG: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}


def _run(migrated_url: str, checkpoints: str, phase: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, __file__, migrated_url, checkpoints, phase],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


def _killed_mid_turn(migrated_url: str, checkpoints: str) -> Any:
    from memabra.storage import EpisodeLog

    died = _run(migrated_url, checkpoints, "die")
    assert died.returncode == -signal.SIGKILL, died.stderr[-3000:]
    with EpisodeLog(migrated_url) as log:
        assert not log.list_episodes().items
        (kept,) = log.suspended_turns()
    assert not kept.paused and kept.document["selection"] is not None and kept.user_id == "ann"
    return kept


@pytest.mark.timeout(300)
def test_a_run_retried_after_its_process_died_goes_on_with_the_decision_it_made(
    migrated_url: str, tmp_path: Path
) -> None:
    from memabra._turn_document import turn_from_document
    from memabra.storage import EpisodeLog

    checkpoints = checkpoints_for(migrated_url, tmp_path)
    kept = _killed_mid_turn(migrated_url, checkpoints)
    routed = turn_from_document(kept.document, 0.0).selection
    retried = _run(migrated_url, checkpoints, "retry")
    assert retried.returncode == 0, retried.stderr[-3000:]
    with EpisodeLog(migrated_url) as log:
        (summary,) = log.list_episodes().items
        episode = log.get_episode(summary.id)
        assert json.loads(retried.stdout.strip().splitlines()[-1]) == {"episode": episode.id}
        assert episode.id == kept.episode_id and episode.answer == "Sent it."
        (selection,) = episode.selections
        assert selection.slots == routed.slots and selection.seed == routed.seed
        assert [(s.kind.value, s.name) for s in episode.steps] == [("model", "ScriptedChatModel")] * 1
        assert not log.suspended_turns() and log.status().lost_turns == 0


@pytest.mark.timeout(300)
def test_a_turn_nobody_retries_is_shown_lost_and_logged_as_failed_with_its_decision(
    migrated_url: str, tmp_path: Path
) -> None:
    from sqlalchemy import text

    from memabra._cli import app
    from memabra._health import health_problems
    from memabra.storage import EpisodeLog, make_engine

    kept = _killed_mid_turn(migrated_url, checkpoints_for(migrated_url, tmp_path))
    runner = CliRunner()
    running = runner.invoke(app, ["episodes", "paused", "--db", migrated_url, "--abandon"])
    assert running.exit_code == 0, running.output
    assert "running" in running.output and "- (running)" in running.output  # too recent to call lost
    with EpisodeLog(migrated_url) as log:
        assert not log.list_episodes().items and log.status().lost_turns == 0

    engine = make_engine(migrated_url)
    with engine.begin() as conn:  # as if the process had died two hours ago
        conn.execute(
            text("UPDATE suspended_turns SET suspended_at = :at"), {"at": kept.suspended_at - timedelta(hours=2)}
        )
    engine.dispose()
    with EpisodeLog(migrated_url) as log:
        state = log.status()
        assert (state.lost_turns, state.paused_turns) == (1, 0)
        (problem,) = health_problems(state)
        assert problem.check == "turns" and "--lost --abandon" in problem.message
    status = runner.invoke(app, ["status", "--db", migrated_url])
    assert status.exit_code != 0 and "died mid-turn" in status.output

    out = tmp_path / "lost.json"
    done = runner.invoke(app, ["episodes", "paused", "--db", migrated_url, "--lost", "--abandon", "--json", str(out)])
    assert done.exit_code == 0, done.output
    (listed,) = json.loads(out.read_text())["paused"]
    assert listed["state"] == "lost" and listed["paused_at"] is None
    with EpisodeLog(migrated_url) as log:
        episode = log.get_episode(listed["logged_as"])
        assert episode.id == kept.episode_id and episode.selections and episode.reward is not None
        assert episode.reward.components.s == 0.0  # accepted: false until someone says otherwise
        assert not log.suspended_turns() and log.status().lost_turns == 0


def _in_process(log: Any, lexical: Any, reply: Any, *, tools: bool = True) -> Any:
    from langchain_core.tools import tool

    from fakes import ScriptedChatModel
    from memabra import Budget, CandidateKind
    from memabra._agent import create_memabra_agent
    from memabra.router import HybridRouter

    @tool
    def send_email(to: str) -> str:
        """Send an email to someone."""
        return f"sent to {to}"

    budget = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
    return create_memabra_agent(
        ScriptedChatModel(replies=[reply]),
        tools=[send_email] if tools else [],
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=budget,
    )


def test_a_turn_taken_for_lost_while_it_still_ran_is_logged_once(log: Any, lexical: Any, caplog: Any) -> None:
    """The operator logged it as failed while its process was still at the model call: the
    process's own logging is refused by the log (the id is taken), and the caller still gets the
    episode id, without an error."""
    from langchain_core.messages import AIMessage, HumanMessage

    from memabra._feedback import RewardService
    from memabra._paused_turns import abandon_paused_turn

    abandoned: list[str] = []

    def abandon_then_answer(messages: Any, tools: Any) -> AIMessage:
        (kept,) = log.suspended_turns()
        abandoned.append(abandon_paused_turn(RewardService(log), kept))
        return AIMessage("Sent it.")

    caplog.set_level(logging.WARNING, "memabra")
    out = _in_process(log, lexical, abandon_then_answer).invoke(
        {"messages": [HumanMessage("Email bob please")]}, CONFIG
    )
    assert out["memabra_episode_id"] == abandoned[0]
    assert [e.id for e in log.list_episodes().items] == abandoned
    assert "not logged again" in caplog.text and not log.suspended_turns()


def test_a_turn_with_nothing_routed_keeps_no_copy(log: Any, lexical: Any) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    copies: list[int] = []

    def answer(messages: Any, tools: Any) -> AIMessage:
        copies.append(len(log.suspended_turns()))
        return AIMessage("Hello.")

    out = _in_process(log, lexical, answer, tools=False).invoke({"messages": [HumanMessage("Hi there")]}, CONFIG)
    assert copies == [0] and not log.get_episode(out["memabra_episode_id"]).selections
    assert "pauses" not in log.get_episode(out["memabra_episode_id"]).metadata


def test_a_log_that_cannot_keep_the_copy_still_gets_the_turn(log: Any, lexical: Any, caplog: Any) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    def down(turn: Any) -> None:
        raise ConnectionError("database restarting")

    log.suspend_turn = down
    caplog.set_level(logging.WARNING, "memabra")
    out = _in_process(log, lexical, AIMessage("Sent it.")).invoke(
        {"messages": [HumanMessage("Email bob please")]}, CONFIG
    )
    episode = log.get_episode(out["memabra_episode_id"])
    assert episode.selections and episode.answer == "Sent it." and "pauses" not in episode.metadata
    assert "its routing decision would be lost" in caplog.text


def test_migration_0012_reads_earlier_rows_as_paused_and_its_downgrade_drops_running_copies(db_url: str) -> None:
    from sqlalchemy import text

    from memabra.storage import downgrade, make_engine, upgrade

    insert = text(
        "INSERT INTO suspended_turns (turn_id, episode_id, user_id, suspended_at, document) "
        "VALUES (:t, :e, 'ann', '2026-01-01 00:00:00+00:00', '{}')"
    )
    engine = make_engine(db_url)
    try:
        upgrade(engine, "0011")
        with engine.begin() as conn:
            conn.execute(insert, {"t": "paused-before", "e": "e1"})
        upgrade(engine, "0012")
        with engine.begin() as conn:
            conn.execute(insert, {"t": "running", "e": "e2"})
            conn.execute(text("UPDATE suspended_turns SET paused = false WHERE turn_id = 'running'"))
            rows = dict(conn.execute(text("SELECT turn_id, paused FROM suspended_turns")).all())
        assert rows == {"paused-before": True, "running": False}
        downgrade(engine, "0011")  # the older schema would read the running copy as paused
        with engine.connect() as conn:
            assert conn.execute(text("SELECT turn_id FROM suspended_turns")).scalars().all() == ["paused-before"]
        assert upgrade(engine) != "0011"
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------- worker


def _worker(log_url: str, checkpoints: str, phase: str) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from memabra.storage import EpisodeLog

    kind, _, where = checkpoints.partition(":")
    log = EpisodeLog(log_url)
    saver, closing = sync_saver(kind, where)
    if phase == "die":  # the model call never returns: the worker is killed (OOM, a deploy, a timeout)

        def killed(messages: Any, tools: Any) -> Any:
            os.kill(os.getpid(), signal.SIGKILL)

        agent = mail_agent(log, [killed], saver)
        agent.invoke({"messages": [HumanMessage("Email bob please")]}, CONFIG, durability="sync")
        raise AssertionError("the model call should have killed the process")
    out = mail_agent(log, [AIMessage("Sent it.")], saver).invoke(None, CONFIG, durability="sync")
    closing()
    log.close()
    print(json.dumps({"episode": out["memabra_episode_id"]}), flush=True)


if __name__ == "__main__":
    _worker(*sys.argv[1:4])
