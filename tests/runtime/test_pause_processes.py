"""One turn, two approvals, three worker processes, real checkpointers: the first process streams
the run to a UI that stops reading at the approval request, and is killed while the run waits; the
second gets the approval, goes on with ``astream`` on the async checkpointer and stops at the next
approval; the third gets that approval. The log holds one whole episode: the first process's
routing decision, every step, two pauses, and none of the waiting in its latency.

The episode log and the checkpoints share one SQLite file's directory, or one PostgreSQL schema
(``MEMABRA_TEST_DATABASE_URL``). This file is also the worker: ``python test_pause_processes.py
LOG_URL CHECKPOINTS PHASE``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from mail_agent import mail_agent
from savers import async_saver, checkpoints_for, sync_saver

HERE = Path(__file__).parent
WAIT_S = 2.0  # a person deciding, between the phases
STEPS = [
    ("model", "ScriptedChatModel", None),
    ("tool", "send_email", "sent to bob"),
    ("model", "ScriptedChatModel", None),
    ("tool", "send_email", "sent to carol"),
    ("model", "ScriptedChatModel", None),
]


@pytest.mark.timeout(300)
def test_one_turn_paused_twice_across_three_processes_is_one_whole_episode(migrated_url: str, tmp_path: Path) -> None:
    from memabra.storage import EpisodeLog

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    checkpoints = checkpoints_for(migrated_url, tmp_path)
    for phase in ("1", "2", "3"):
        if phase != "1":
            time.sleep(WAIT_S)
        done = subprocess.run(
            [sys.executable, __file__, migrated_url, checkpoints, phase],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
        expected = -signal.SIGKILL if phase == "1" else 0  # the first process is killed while paused
        assert done.returncode == expected, done.stderr[-3000:]
    with EpisodeLog(migrated_url) as log:
        (summary,) = log.list_episodes().items
        episode = log.get_episode(summary.id)
        assert [(s.kind.value, s.name, s.result) for s in episode.steps] == STEPS
        assert episode.metadata["pauses"] == 2 and episode.selections and episode.user_id == "ann"
        assert "tool:send_email" in episode.selections[0].chosen_ids
        latency = episode.metadata["latency_ms"]
        assert isinstance(latency, float) and latency < WAIT_S * 1000, latency
        assert not log.suspended_turns() and log.status().paused_turns == 0
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"episode": episode.id}


# ---------------------------------------------------------------------------------------- worker


def _worker(log_url: str, checkpoints: str, phase: str) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.types import Command

    from memabra.storage import EpisodeLog

    config: Any = {"configurable": {"thread_id": "mail", "user_id": "ann"}}
    approve = Command(resume={"decisions": [{"type": "approve"}]})

    def email(to: str) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "send_email", "args": {"to": to}, "id": f"call-{to}"}])

    kind, _, where = checkpoints.partition(":")
    log = EpisodeLog(log_url)
    if phase == "1":  # sync: a UI reads the stream and stops at the approval request
        saver, closing = sync_saver(kind, where)
        agent = mail_agent(log, [email("bob")], saver, approvals=True)
        for chunk in agent.stream({"messages": [HumanMessage("Email bob and carol")]}, config, stream_mode="updates"):
            if "__interrupt__" in chunk:
                break
        closing()
        os.kill(os.getpid(), signal.SIGKILL)  # killed while the run waits for a person
    if phase == "2":  # async: the same, on the async checkpointer

        async def second() -> None:
            async with async_saver(kind, where) as saver:
                agent = mail_agent(log, [email("carol")], saver, approvals=True)
                async with aclosing(agent.astream(approve, config, stream_mode="updates")) as chunks:
                    async for chunk in chunks:
                        if "__interrupt__" in chunk:
                            break

        asyncio.run(second())
        log.close()
        return
    saver, closing = sync_saver(kind, where)
    out = mail_agent(log, [AIMessage("Sent both.")], saver, approvals=True).invoke(approve, config)
    closing()
    log.close()
    print(json.dumps({"episode": out["memabra_episode_id"]}), flush=True)


if __name__ == "__main__":
    _worker(*sys.argv[1:4])
