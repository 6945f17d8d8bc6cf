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
    assert "memabra episodes delete --user ann --include-unlearned" in result.output
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


def test_a_bad_json_path_is_refused_before_anything_is_stored_or_deleted(url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "nodir" / "x.json"
    added = run("add", "My cat is called Tom", "--user", "ann", "--db", url, "--json", str(missing))
    assert added.exit_code == 2 and "does not exist; create it first" in " ".join(added.output.split())
    assert "0 memories" in run("list", "--user", "ann", "--db", url).output
    assert run("add", "I drink tea", "--user", "ann", "--db", url).exit_code == 0
    gone = run("forget", "--all", "--user", "ann", "--db", url, "--json", str(tmp_path))
    assert gone.exit_code == 2 and "is a folder" in gone.output
    assert "1 memory" in run("list", "--user", "ann", "--db", url).output
    assert not missing.parent.exists() and list(tmp_path.glob("*.tmp")) == []


def test_json_to_standard_output_is_the_json_alone(url: str) -> None:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["memories", "add", "I drink tea", "--user", "ann", "--db", url, "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"] == "I drink tea"
    assert "remembered" in result.stderr


def test_importing_a_file_that_is_not_utf8_names_the_line_and_imports_nothing(url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "facts.txt"
    bad.write_bytes("I live in Lyon\nMy caf\u00e9 is Flore\n".encode("latin-1"))
    result = run("import", str(bad), "--user", "ann", "--db", url)
    assert result.exit_code == 1, result.output
    assert "facts.txt:2: not UTF-8 text (byte 0xe9)" in result.output and "nothing was imported" in result.output
    assert "Traceback" not in result.output
    assert "0 memories" in run("list", "--user", "ann", "--db", url).output
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbfI drink tea\n")
    assert run("import", str(bom), "--user", "ann", "--db", url).exit_code == 0
    assert json_list(url, "ann") == ["I drink tea"]  # the byte-order mark is not part of the fact


def json_list(url: str, user: str, *, active: bool = False) -> list[str]:
    result = CliRunner().invoke(
        app, ["memories", "list", "--user", user, "--db", url, "--json", "-", *(["--active"] if active else [])]
    )
    assert result.exit_code == 0, result.output
    return [r["text"] for r in json.loads(result.stdout)]


def test_update_refuses_a_retired_memory_and_retire_restore_keep_one_current_value(url: str) -> None:
    assert run("add", "I moved to Bergen last month", "--user", "ann", "--db", url).exit_code == 0
    assert run("add", "I live in Lyon", "--user", "ann", "--db", url).exit_code == 0
    rows = {r["text"]: r for r in _rows(url, "ann")}
    bergen, lyon = rows["I moved to Bergen last month"]["id"], rows["I live in Lyon"]["id"]
    assert rows["I moved to Bergen last month"]["status"] == "retired"

    updated = run("update", bergen, "I moved to Oslo", "--user", "ann", "--db", url)
    assert updated.exit_code == 1 and "is retired" in updated.output and "restore it first" in updated.output
    assert json_list(url, "ann", active=True) == ["I live in Lyon"]

    refused = run("restore", bergen, "--user", "ann", "--db", url)
    assert refused.exit_code == 1 and "contradicts the current" in refused.output and lyon in refused.output
    assert "--keep-both" in refused.output
    assert json_list(url, "ann", active=True) == ["I live in Lyon"]
    both = run("restore", bergen, "--user", "ann", "--db", url, "--replace", "--keep-both")
    assert both.exit_code == 1 and "exclude each other" in both.output

    restored = run("restore", bergen, "--user", "ann", "--db", url, "--replace")
    assert restored.exit_code == 0, restored.output
    assert f"retired {lyon}" in restored.output
    assert json_list(url, "ann", active=True) == ["I moved to Bergen last month"]

    assert run("retire", bergen, "--user", "ann", "--db", url, "--reason", "wrong city").exit_code == 0
    assert json_list(url, "ann", active=True) == []
    again = run("retire", bergen, "--user", "ann", "--db", url)
    assert again.exit_code == 1 and "already retired" in again.output
    assert run("restore", bergen, "--user", "ann", "--db", url).exit_code == 0  # nothing current contradicts it
    history = CliRunner().invoke(app, ["memories", "history", bergen, "--user", "ann", "--db", url, "--json", "-"])
    actions = [(c["action"], c["reason"]) for c in json.loads(history.stdout)]
    assert [a for a, _ in actions] == ["created", "retired", "restored", "retired", "restored"]
    assert ("retired", "wrong city") in actions


def _rows(url: str, user: str) -> list[dict[str, str]]:
    result = CliRunner().invoke(app, ["memories", "list", "--user", user, "--db", url, "--json", "-"])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, str]] = json.loads(result.stdout)
    return rows
