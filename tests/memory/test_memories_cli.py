"""``memabra memories ...`` on both databases."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import upgrade

runner = CliRunner(env={"COLUMNS": "200"})


def run(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["memories", *args])


@pytest.fixture
def url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def test_add_import_list_update_history_forget(url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert run("add", "I live in Lyon", "--user", "ann", "--db", url).exit_code == 0
    facts = tmp_path / "facts.txt"
    facts.write_text('I moved to Hobart\n{"text": "My dog is called Rex"}\n\nmy dog is called Rex\n')
    result = run("import", str(facts), "--user", "ann", "--db", url)
    assert result.exit_code == 0 and "imported 2 of 3 facts" in result.output
    listing = tmp_path / "list.json"
    result = run("list", "--user", "ann", "--db", url, "--json", str(listing))
    assert result.exit_code == 0
    rows = {r["text"]: r for r in json.loads(listing.read_text())}
    assert rows["I live in Lyon"]["status"] == "retired" and rows["I moved to Hobart"]["status"] == "active"
    assert {"id", "text", "status", "created_at", "last_used_at"} <= rows["I moved to Hobart"].keys()
    for needle in ("retired", "active", "last used", "never"):
        assert needle in result.output
    dog = rows["My dog is called Rex"]["id"]
    assert run("update", dog, "My dog is called Luna", "--user", "ann", "--db", url).exit_code == 0
    history = tmp_path / "history.json"
    assert run("history", dog, "--user", "ann", "--db", url, "--json", str(history)).exit_code == 0
    assert [c["action"] for c in json.loads(history.read_text())] == ["created", "updated"]
    assert run("forget", dog, "--user", "ann", "--db", url).exit_code == 0
    result = run("forget", "--all", "--user", "ann", "--db", url)
    assert result.exit_code == 0 and "forgot 2 memories" in result.output
    assert "0 memories" in run("list", "--user", "ann", "--db", url).output


def test_errors_are_one_line_and_name_the_problem(url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run("forget", "mem:nope", "--user", "ann", "--db", url)
    assert result.exit_code == 1 and "no memory 'mem:nope'" in result.output
    assert "give a memory id or --all" in run("forget", "--user", "ann", "--db", url).output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "I live in Lyon"}\n{"txt": "oops"}\n')
    result = run("import", str(bad), "--user", "ann", "--db", url)
    assert result.exit_code == 1 and "bad.jsonl:2" in result.output and "nothing was imported" in result.output
    assert "0 memories" in run("list", "--user", "ann", "--db", url).output
    assert "non-empty text" in run("add", "  ", "--user", "ann", "--db", url).output


def test_an_unmigrated_database_names_the_upgrade_command(db_url: str) -> None:
    # A missing SQLite file is refused by --db itself (exit 2), an empty database by the command (exit 1).
    result = run("list", "--user", "ann", "--db", db_url)
    assert result.exit_code in (1, 2) and "memabra db upgrade" in result.output


@pytest.mark.slow
def test_search_uses_the_routers_recall(url: str) -> None:
    for fact in ("I live in Lyon", "My dog is called Rex", "I am vegetarian"):
        run("add", fact, "--user", "ann", "--db", url)
    result = run("search", "what is my dog called", "--user", "ann", "--db", url, "--limit", "1")
    assert result.exit_code == 0 and "My dog is called Rex" in result.output and "Lyon" not in result.output
