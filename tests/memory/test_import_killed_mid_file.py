"""``memabra memories import`` killed (SIGKILL) between two chunks of the file, or inside a write
transaction of a chunk, then run again: no fact twice, none missing, the same ones retired and cut
as an import that ran through, whatever chunk a user's lines fell in.

The command runs in a process of its own with small chunks (so a short file spans many, and users
span chunks), held at the chosen point until the test kills it: deterministic, no race with the
clock. Before, a fact restating what was left of a memory another fact was cut out of ("I'm allergic
to nuts" after "My name is Annabel" cut "My name is Ann and I'm allergic to nuts") was stored twice
when both were in one chunk, once when they were in two, or when the import was killed between and
run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import upgrade

runner = CliRunner(env={"COLUMNS": "200"})

# One user's export: a city then a move, a negation, a memory joining two facts of which a later
# line replaces one, and restatements (the last one of what the cut leaves).
FACTS = [
    "I live in Lyon",
    "My dog is called Rex",
    "I am vegetarian",
    "My name is Ann and I'm allergic to nuts",
    "I like jazz",
    "I moved to Hobart",
    "My name is Annabel",
    "I'm not vegetarian anymore",
    "my dog is called Rex.",
    "I'm allergic to nuts",
    "I play chess on Sundays",
]
USERS = 6
CHUNK = 7  # facts a chunk holds here: every user's lines run on into the next chunk

# The command, its chunk size set, held (a marker file written, then asleep) at the point the
# test names: before the N-th chunk is imported, or right after the N-th INSERT into the registry
# table ran, inside its transaction (the insert of new facts, or a fact that retires or cuts);
# nowhere for "none:0".
_HELD_CLI = """
import os, sys, time
import memabra._cli._memories_import as imports
imports.CHUNK_FACTS = int(os.environ["TEST_CHUNK"])
where, n = os.environ["TEST_HOLD"].split(":")
n = int(n)

def hold():
    open(os.environ["TEST_MARKER"], "w").close()
    time.sleep(600)

if where == "chunk":
    chunks = imports._chunks
    def held(checked):
        for k, chunk in enumerate(chunks(checked)):
            if k == n:
                hold()
            yield chunk
    imports._chunks = held
elif where == "insert":
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    inserts = [0]
    def count(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO REGISTRY"):
            inserts[0] += 1
            if inserts[0] == n:
                hold()
    event.listen(Engine, "after_cursor_execute", count)
from memabra._cli import app
sys.argv[0] = "memabra"
app()
"""


def _lines() -> list[str]:
    """Users 0 and 1 interleaved line by line, then the others one after another."""
    per_user = [
        [json.dumps({"user_id": f"u{u}", "memory": f.replace("Rex", f"Rex{u}")}) for f in FACTS] for u in range(USERS)
    ]
    mixed = [line for pair in zip(per_user[0], per_user[1], strict=True) for line in pair]
    return mixed + [line for lines in per_user[2:] for line in lines]


def stored(url: str) -> dict[str, list[tuple[str, bool]]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT owner, text, retired_at IS NOT NULL FROM registry WHERE kind = 'memory'"))
            out: dict[str, list[tuple[str, bool]]] = {}
            for owner, t, retired in rows:
                out.setdefault(owner, []).append((t.replace(f"Rex{owner[1:]}", "Rex"), bool(retired)))
    finally:
        engine.dispose()
    return {k: sorted(v) for k, v in out.items()}


@pytest.fixture
def url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def _uninterrupted(url: str, tmp_path: Path) -> list[tuple[str, bool]]:
    """One user's facts imported in one chunk, by a run nothing stopped."""
    whole = tmp_path / "whole.jsonl"
    whole.write_text("".join(json.dumps({"user_id": "whole", "memory": f}) + "\n" for f in FACTS))
    result = runner.invoke(app, ["memories", "import", str(whole), "--db", url])
    assert result.exit_code == 0, result.output
    return stored(url).pop("whole")


@pytest.mark.parametrize("hold", ["chunk:3", "insert:1", "insert:6", "insert:13"])
def test_an_import_killed_between_or_inside_a_chunks_writes_and_run_again_ends_as_one_run(
    url: str, tmp_path: Path, hold: str
) -> None:
    path = tmp_path / "mem0.jsonl"
    path.write_text("\n".join(_lines()) + "\n")
    marker = tmp_path / "held"
    command = ["memories", "import", str(path), "--db", url]
    env = {**os.environ, "TEST_CHUNK": str(CHUNK), "TEST_HOLD": hold, "TEST_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-c", _HELD_CLI, *command], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), f"the import never reached {hold}: {proc.poll()}"
        proc.send_signal(signal.SIGKILL)
    finally:
        _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err
    killed = stored(url)
    assert sum(map(len, killed.values())) < USERS * len(FACTS)
    again = subprocess.run(  # the same command, nothing held
        [sys.executable, "-c", _HELD_CLI, *command],
        env={**env, "TEST_HOLD": "none:0"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    after = stored(url)
    expected = _uninterrupted(url, tmp_path)
    assert ("I'm allergic to nuts", False) in expected and ("I live in Lyon", True) in expected
    assert after == {f"u{u}": expected for u in range(USERS)}  # no duplicate, none missing, the same retired


def test_an_import_in_small_chunks_ends_as_one_in_a_single_chunk(url: str, tmp_path: Path) -> None:
    path = tmp_path / "mem0.jsonl"
    path.write_text("\n".join(_lines()) + "\n")
    env = {**os.environ, "TEST_CHUNK": str(CHUNK), "TEST_HOLD": "none:0", "TEST_MARKER": str(tmp_path / "held")}
    done = subprocess.run(
        [sys.executable, "-c", _HELD_CLI, "memories", "import", str(path), "--db", url],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    imported = stored(url)
    expected = _uninterrupted(url, tmp_path)
    # before: the uninterrupted single-chunk import stored "I'm allergic to nuts" twice
    assert sorted(expected).count(("I'm allergic to nuts", False)) == 1
    assert imported == {f"u{u}": expected for u in range(USERS)}
