"""Review of the bulk import: a line the database would refuse is named before anything is
written, whichever user's lines come before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import upgrade

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def _memories(url: str) -> list[tuple[str, str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT owner, text FROM registry WHERE kind = 'memory'"))
            return sorted((str(o), str(t)) for o, t in rows)
    finally:
        engine.dispose()


def test_a_user_id_longer_than_the_log_holds_is_named_by_its_line_and_nothing_is_imported(
    url: str, tmp_path: Path
) -> None:
    path = tmp_path / "mem0.jsonl"
    lines = [
        {"user_id": "ann", "memory": "I like tea"},
        {"user_id": "b" * 201, "memory": "I like jazz"},
        {"user_id": "cid", "memory": "I like folk"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = runner.invoke(app, ["memories", "import", str(path), "--db", url])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "mem0.jsonl:2:" in said and "200 characters" in said and "nothing was imported" in said
    assert _memories(url) == []  # ann's line came first, and was not written either


def test_a_user_option_longer_than_the_log_holds_is_refused_before_any_write(url: str, tmp_path: Path) -> None:
    path = tmp_path / "facts.txt"
    path.write_text("I like tea\n", encoding="utf-8")
    result = runner.invoke(app, ["memories", "import", str(path), "--user", "u" * 201, "--db", url])
    assert result.exit_code == 1 and "200 characters" in " ".join(result.output.split())
    assert _memories(url) == []
