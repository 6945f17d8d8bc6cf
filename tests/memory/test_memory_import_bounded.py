"""An import's memory is bounded by a chunk of the file, not the file, and its work per fact does
not grow with the facts a user already has on the same subject.

``memabra memories import`` read the whole file, decoded it, split it and kept every cleaned fact
before the first write (an 81 MB mem0 export: 618 MiB peak RSS); it now checks the file as a
stream, then reads it again a chunk at a time. One user's thousands of facts on the same subjects
("I live in City-n", each retiring the one before) read all of the user's memories, retired ones
too, before each write: the cost per fact grew with the facts before it. Work is counted here
(statements, SQLite's virtual machine steps, memory traced), never timed."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, text
from typer.testing import CliRunner

import memabra._cli._memories_import as importing
from memabra import SQLMemory
from memabra._cli import app
from memabra._facts import RuleFactExtractor
from memabra.storage import EpisodeLog, upgrade

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def active(url: str, user: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT text FROM registry WHERE kind = 'memory' AND owner = :u AND retired_at IS NULL"),
                {"u": user},
            )
            return sorted(str(t) for (t,) in rows)
    finally:
        engine.dispose()


# ---------------------------------------------------------------------- memory: a chunk, not the file

_METADATA = {"source": "chat", "tags": [f"tag{i}" for i in range(300)]}  # about 3,000 characters a line


def test_an_import_holds_a_chunk_of_the_file_not_the_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mem0's export shape with its other fields (ignored), 40 users each stating one fact 100 times
    # (exports repeat facts): 12 MB of lines, 40 facts imported. What the import holds at once is
    # what it read of the file.
    path = tmp_path / "export.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for u in range(40):
            for k in range(100):
                row = {
                    "id": f"m{u}-{k}",
                    "user_id": f"u{u:02d}",
                    "memory": f"I like tea number {u}",
                    "metadata": _METADATA,
                }
                out.write(json.dumps(row) + "\n")
    size = path.stat().st_size
    assert size > 12_000_000
    monkeypatch.setattr(importing, "CHUNK_FACTS", 100)
    warm = tmp_path / "warm.jsonl"  # the first import's one-off costs (compiled statements) are not the file's
    warm.write_text('{"user_id": "warm", "memory": "I like tea"}\n')
    assert runner.invoke(app, ["memories", "import", str(warm), "--db", url]).exit_code == 0
    out_json = tmp_path / "imported.json"
    tracemalloc.start(1)
    try:
        result = runner.invoke(app, ["memories", "import", str(path), "--db", url, "--json", str(out_json)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    assert "imported 40 of 4000 facts for 40 users" in result.output
    # the file held once is `size` bytes, and it was held three times (read, decoded, split); the
    # import's own fixed costs (a database engine, the command's parsing) are about 1.7 MB
    assert peak < size / 4, f"the import held {peak / 1e6:.1f} MB of a {size / 1e6:.1f} MB file"
    listed = json.loads(out_json.read_text())
    assert [(r["user"], r["text"]) for r in listed] == [(f"u{u:02d}", f"I like tea number {u}") for u in range(40)]
    assert out_json.read_text() == json.dumps(listed, indent=2) + "\n"  # as --json writes any list


def test_a_user_whose_lines_span_chunks_is_imported_in_file_order(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chunks of 3 facts: "I moved to Hobart" comes in a later chunk than "I live in Lyon", and bob's
    # lines are interleaved with ann's; the store ends as with the whole file at once
    lines = [
        ("ann", "I live in Lyon"),
        ("bob", "My favourite colour is red"),
        ("ann", "My dog is called Rex"),
        ("bob", "I like jazz"),
        ("ann", "I moved to Hobart"),
        ("bob", "My favourite colour is blue"),
        ("ann", "I live in Lyon"),  # a restatement of a retired fact: skipped, as in one run
    ]
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps({"user_id": u, "memory": m}) + "\n" for u, m in lines))
    monkeypatch.setattr(importing, "CHUNK_FACTS", 3)
    result = runner.invoke(app, ["memories", "import", str(path), "--db", url])
    assert result.exit_code == 0 and "imported 6 of 7 facts for 2 users" in result.output, result.output
    assert active(url, "ann") == ["I moved to Hobart", "My dog is called Rex"]
    assert active(url, "bob") == ["I like jazz", "My favourite colour is blue"]
    again = runner.invoke(app, ["memories", "import", str(path), "--db", url])
    assert again.exit_code == 0 and "imported 0 of 7 facts" in again.output


def test_a_bad_line_after_many_chunks_imports_nothing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "export.jsonl"
    good = "".join(json.dumps({"user_id": f"u{i}", "memory": f"I like tea {i}"}) + "\n" for i in range(50))
    path.write_text(good + '{"user_id": "u1", "memory": "..."}\n')
    monkeypatch.setattr(importing, "CHUNK_FACTS", 5)
    result = runner.invoke(app, ["memories", "import", str(path), "--db", url])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "export.jsonl:51: a memory needs non-empty text" in said, said
    assert "nothing was imported" in said and active(url, "u0") == []


def test_a_file_rewritten_during_the_import_with_as_many_facts_is_not_reported_imported(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the file is rewritten after the first chunk's write (an export job writing it again): as
    # many facts, other text. The import cannot say what it read of which version, so it must not
    # end as "imported N of N facts", exit 0: it says the file changed and to run it again.
    path = tmp_path / "export.jsonl"

    def write(colour: str) -> None:
        path.write_text(
            "".join(json.dumps({"user_id": f"u{i}", "memory": f"I like {colour} {i}"}) + "\n" for i in range(6))
        )

    write("tea")
    monkeypatch.setattr(importing, "CHUNK_FACTS", 2)
    real = importing.run_guarded
    calls = []

    def rewriting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        done = real(*args, **kwargs)
        if len(calls) == 1:
            before = path.stat().st_mtime_ns
            write("tee")  # the same size, a new version
            os.utime(path, ns=(before + 10**9, before + 10**9))
        return done

    monkeypatch.setattr(importing, "run_guarded", rewriting)
    result = runner.invoke(app, ["memories", "import", str(path), "--db", url])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "changed during the import" in said and "run it again" in said, said


# ---------------------------------------------------------------------- same-subject facts: linear work


def _same_subject(n: int) -> list[str]:
    return [f"I live in City-{i}" if i % 2 == 0 else f"My favourite colour is C-{i}" for i in range(n)]


class _Work:
    """Statements run, reads of every active memory of a user (each visits all of the user's
    memories, retired ones too), and on SQLite the virtual machine's steps (in thousands)."""

    def __init__(self, log: EpisodeLog) -> None:
        self.statements = self.scans = self.steps = 0
        event.listen(log.engine, "before_cursor_execute", self._before)

    def _before(self, conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        self.statements += 1
        flat = " ".join(statement.split())
        if flat.startswith("SELECT registry.id, registry.text FROM registry") and "retired_at IS NULL" in flat:
            self.scans += 1
        raw = conn.connection.dbapi_connection
        if conn.dialect.name == "sqlite":
            raw.set_progress_handler(self._step, 1000)

    def _step(self) -> int:
        self.steps += 1
        return 0


def _import_work(url: str, user: str, facts: Sequence[str]) -> _Work:
    log = EpisodeLog(url)
    try:
        work = _Work(log)
        assert len(SQLMemory(log).remember_many(user, facts)) == len(facts)
        return work
    finally:
        log.close()


def test_the_work_per_same_subject_fact_does_not_grow_with_the_facts_before_it(url: str) -> None:
    small, large = 250, 1000
    few = _import_work(url, "few", _same_subject(small))
    many = _import_work(url, "many", _same_subject(large))
    assert active(url, "many") == [f"I live in City-{large - 2}", f"My favourite colour is C-{large - 1}"]
    # reads of all of a user's memories: as many for 1,000 facts as for 250 (were two per fact)
    assert many.scans == few.scans <= 3
    assert many.statements / large <= 1.1 * few.statements / small
    if url.startswith("sqlite"):  # the database's own work per fact, flat (it grew 3-fold here)
        assert many.steps / large <= 1.3 * few.steps / small, (few.steps, many.steps)


class _WritesMidway:
    """The rule supersession, and once ``at`` facts were decided another process (an agent serving
    the same user) stores a new favourite colour: the import must see it."""

    def __init__(self, other: SQLMemory, at: int) -> None:
        self.rules, self.other, self.left = RuleFactExtractor(), other, at

    def superseded(self, fact: str, existing: Sequence[tuple[str, str]]) -> list[str]:
        self.left -= 1
        if self.left == 0:
            self.other.remember("ann", "My favourite colour is teal")
        return self.rules.superseded(fact, existing)


def test_a_write_by_another_process_during_an_import_is_superseded_in_order(url: str) -> None:
    agent_log, import_log = EpisodeLog(url), EpisodeLog(url)
    try:
        agent = SQLMemory(agent_log)
        memory = SQLMemory(import_log, supersession=_WritesMidway(agent, at=5))
        memory.remember_many("ann", _same_subject(12))
        # teal was stored while City-6 (the 5th fact to supersede one) was decided: C-7 retired it
        assert active(url, "ann") == ["I live in City-10", "My favourite colour is C-11"]
        retired_teal = [r for r in memory.list("ann") if r.text == "My favourite colour is teal"]
        assert len(retired_teal) == 1 and retired_teal[0].superseded_by is not None
    finally:
        agent_log.close()
        import_log.close()
