"""Importing an existing store (mem0 / LangMem exports): the same import run again, or re-run after
the process was killed, ends as one uninterrupted run; bad lines are refused by line, before any
write; text PostgreSQL refuses (NUL, lone surrogates) is stored cleaned on every backend."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from memabra._cli import app
from memabra._errors import InvalidRecordError
from memabra._memory import MemoryBackend
from memabra.storage import upgrade

runner = CliRunner(env={"COLUMNS": "200"})
_CLI = "import sys; from memabra._cli import app; sys.argv[0] = 'memabra'; app()"

# A user's export: a city, later the city they moved to, a negation, a memory joining two facts
# of which a later line replaces one, restatements.
EXPORT = [
    "I live in Lyon",
    "My dog is called Rex",
    "I am vegetarian",
    "My name is Ann and I'm allergic to nuts",
    "I moved to Hobart",
    "my dog is called Rex.",
    "I'm not vegetarian anymore",
    "My name is Annabel",
    "I like jazz",
]


def snapshot(memory: MemoryBackend, user: str) -> list[tuple[str, str, str]]:
    return sorted((r.id, r.text, r.status.value) for r in memory.list(user))


def content(memory: MemoryBackend, user: str) -> list[tuple[str, str]]:
    return sorted((r.text, r.status.value) for r in memory.list(user))


def test_the_same_import_run_again_adds_and_retires_nothing(memory: MemoryBackend) -> None:
    memory.remember_many("ann", EXPORT)
    before = snapshot(memory, "ann")
    assert ("I moved to Hobart", "active") in content(memory, "ann")
    assert memory.remember_many("ann", EXPORT) == []
    assert snapshot(memory, "ann") == before  # before: Lyon current again, Hobart retired


@pytest.mark.parametrize("cut", range(1, len(EXPORT)))
def test_an_import_stopped_after_any_fact_and_run_again_ends_as_one_run(memory: MemoryBackend, cut: int) -> None:
    memory.remember_many("whole", EXPORT)
    memory.remember_many("ann", EXPORT[:cut])  # what was committed when the process died
    memory.remember_many("ann", EXPORT)  # the same command again
    assert content(memory, "ann") == content(memory, "whole")


def test_a_bad_fact_names_its_position_and_nothing_is_written(memory: MemoryBackend) -> None:
    with pytest.raises(InvalidRecordError, match="fact 3 of the import: a memory needs non-empty text"):
        memory.remember_many("ann", ["I like jazz", "I live in Lyon", " ... "])
    with pytest.raises(InvalidRecordError, match="user"):
        memory.remember_many("", ["I like jazz"])
    assert memory.list("ann") == []


def test_nul_and_lone_surrogates_are_stored_cleaned_on_every_backend(memory: MemoryBackend) -> None:
    # PostgreSQL refuses both (a PostgresStore import failed with a driver error); SQL dropped them
    memory.remember_many("ann", ["I like\x00 tea", "My cat is called \ud800Tom"])
    assert sorted(r.text for r in memory.list("ann")) == ["I like tea", "My cat is called \ufffdTom"]
    memory.remember("ann", "I drink\x00 coffee")
    assert "I drink coffee" in [r.text for r in memory.list("ann")]


# ---------------------------------------------------------------------- the CLI, both databases


@pytest.fixture
def url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def stored(url: str) -> dict[str, list[tuple[str, bool]]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT owner, text, retired_at IS NOT NULL FROM registry WHERE kind = 'memory'"))
            out: dict[str, list[tuple[str, bool]]] = {}
            for owner, t, retired in rows:
                out.setdefault(owner, []).append((t, bool(retired)))
    finally:
        engine.dispose()
    return {k: sorted(v) for k, v in out.items()}


# Every fact, the joined memory too: storing "My name is Annabel" and cutting "My name is Ann" out
# of "My name is Ann and I'm allergic to nuts" is one write, so a kill leaves both or neither.
KILLED_EXPORT = EXPORT


def export(path: Path, users: int) -> int:
    """mem0's export shape, one user after another (some German and Chinese)."""
    lines = []
    for u in range(users):
        facts = [f.replace("Rex", f"Rex{u}") for f in KILLED_EXPORT]
        facts += ["Ich wohne gern in Köln", "我喜欢喝茶"] if u % 3 == 0 else []
        lines += [json.dumps({"user_id": f"u{u:04d}", "memory": f}, ensure_ascii=False) for f in facts]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def test_one_file_of_many_users_imports_each_into_its_own_memories(url: str, tmp_path: Path) -> None:
    path = tmp_path / "mem0.jsonl"
    total = export(path, 3)
    result = runner.invoke(app, ["memories", "import", str(path), "--db", url])
    assert result.exit_code == 0, result.output
    assert f"of {total} facts for 3 users" in result.output
    found = stored(url)
    assert set(found) == {"u0000", "u0001", "u0002"}
    assert ("I moved to Hobart", False) in found["u0001"] and ("I live in Lyon", True) in found["u0001"]
    assert ("我喜欢喝茶", False) in found["u0000"] and len(found["u0001"]) == len(KILLED_EXPORT) - 1
    again = runner.invoke(app, ["memories", "import", str(path), "--db", url])
    assert again.exit_code == 0 and f"imported 0 of {total} facts" in again.output
    assert stored(url) == found


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"memory": "I like tea"}', "bad.jsonl:2: no user: give --user"),
        ('{"user_id": "bob", "memory": "I like tea"', "bad.jsonl:2: not valid JSON"),
        ("I like tea", "bad.jsonl:2: not valid JSON"),  # a .jsonl file is JSON lines only
        ('["bob", "I like tea"]', "bad.jsonl:2: a JSON line must be an object"),
        ('{"user_id": "bob", "memory": "  "}', "bad.jsonl:2: a JSON line needs a non-empty 'text'"),
        ('{"user_id": "bob", "memory": "..."}', "bad.jsonl:2: a memory needs non-empty text"),
        ('{"user_id": "bob", "memory": "I like\\u0000 tea"}', "bad.jsonl:2: a NUL character"),
        ('{"user_id": 7, "memory": "I like tea"}', "bad.jsonl:2: 'user_id' must be a non-empty string"),
    ],
)
def test_a_bad_line_is_named_and_nothing_is_imported(url: str, tmp_path: Path, line: str, message: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user_id": "ann", "memory": "I live in Lyon"}\n' + line + "\n", encoding="utf-8")
    result = runner.invoke(app, ["memories", "import", str(bad), "--db", url])
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert message in said and "nothing was imported" in said and "Traceback" not in said
    assert stored(url) == {}


def test_a_line_of_another_user_than_the_user_option_is_refused(url: str, tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    path.write_text('{"text": "I like tea"}\n{"user_id": "bob", "text": "I like jazz"}\n')
    result = runner.invoke(app, ["memories", "import", str(path), "--user", "ann", "--db", url])
    assert result.exit_code == 1 and "facts.jsonl:2: the line is user 'bob'" in " ".join(result.output.split())
    assert stored(url) == {}


def test_an_import_killed_midway_and_run_again_ends_as_one_uninterrupted_run(url: str, tmp_path: Path) -> None:
    path = tmp_path / "mem0.jsonl"
    users = 300
    total = export(path, users)
    command = [sys.executable, "-c", _CLI, "memories", "import", str(path), "--db", url]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while proc.poll() is None and len(stored(url)) < users // 3:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
    killed = stored(url)
    assert 0 < len(killed) < users, "the import finished before it could be killed: give it more users"
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    after = stored(url)
    assert len(after) == users and sum(map(len, after.values())) <= total
    whole = tmp_path / "whole.jsonl"  # the uninterrupted import of one user, as every user should be
    whole.write_text("".join(json.dumps({"user_id": "whole", "memory": f}) + "\n" for f in KILLED_EXPORT))
    assert runner.invoke(app, ["memories", "import", str(whole), "--db", url]).exit_code == 0
    expected = stored(url)["whole"]
    for user, memories in after.items():
        english = sorted((t.replace(f"Rex{int(user[1:])}", "Rex"), r) for t, r in memories if t.isascii())
        assert english == expected, user  # no duplicate, none missing, the same ones retired
