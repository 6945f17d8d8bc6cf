"""Several agent processes on one SQLite file lose no turn: every write that reads before it
writes takes the write lock up front (``BEGIN IMMEDIATE``) and is retried, so a commit by another
process in between makes it wait, never fail. Code that wrote outside the log's transactions (the
memory registry, the embedding cache) lost 49 to 84 of 240 turns to "database is locked" in
``benchmarks/sqlite_processes.py``; this is that benchmark, smaller, as a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memabra.storage import upgrade

HERE = Path(__file__).parent
PROCESSES = 3
TURNS = 20


@pytest.mark.timeout(600)
def test_agent_processes_sharing_one_sqlite_file_lose_no_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    upgrade(url)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    workers = [
        subprocess.Popen(
            [sys.executable, str(HERE / "sqlite_turns_worker.py"), url, str(seed), str(TURNS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in range(PROCESSES)
    ]
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=540)
        assert worker.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    failed = [r for r in reports if r["counts"].get("failed")]
    assert not failed, failed
    assert sum(r["counts"]["ok"] for r in reports) == PROCESSES * TURNS
