"""Commands on-call engineers run by hand against a large log: ``memories list`` shows a page and
says how many more (its ``--json`` every one), and a malformed time is a usage error naming its
option (exit 2, like every other malformed option value)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra._cli import app
from memabra._sql_memory import SQLMemory
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})


def _remember(url: str, n: int) -> None:
    with EpisodeLog(url) as log:
        SQLMemory(log).remember_many("ann", [f"Ticket ABC-{i} was about printer number {i}" for i in range(n)])


def test_memories_list_shows_a_page_and_says_how_many_more(migrated_url: str, tmp_path: Path) -> None:
    _remember(migrated_url, 7)
    out = tmp_path / "all.json"
    page = runner.invoke(app, ["memories", "list", "--user", "ann", "--db", migrated_url, "--limit", "3"])
    assert page.exit_code == 0, page.output
    assert page.output.count("mem:") == 3
    assert "3 of 7 memories shown; 4 more: --limit N or --all" in page.output
    with_json = runner.invoke(
        app, ["memories", "list", "--user", "ann", "--db", migrated_url, "--limit", "3", "--json", str(out)]
    )
    assert with_json.exit_code == 0 and "(--json holds them all)" in with_json.output
    assert len(json.loads(out.read_text())) == 7  # the file is complete: nothing silently dropped
    every = runner.invoke(app, ["memories", "list", "--user", "ann", "--db", migrated_url, "--limit", "3", "--all"])
    assert every.exit_code == 0 and every.output.count("mem:") == 7 and "7 memories" in every.output
    default = runner.invoke(app, ["memories", "list", "--user", "ann", "--db", migrated_url])
    assert default.output.count("mem:") == 7 and "more:" not in default.output  # under the default page


def test_memories_list_shows_a_hundred_by_default(migrated_url: str) -> None:
    from memabra._cli._memories import LIST_LIMIT

    _remember(migrated_url, LIST_LIMIT + 2)
    page = runner.invoke(app, ["memories", "list", "--user", "ann", "--db", migrated_url])
    assert page.exit_code == 0, page.output
    assert page.output.count("mem:") == LIST_LIMIT
    assert f"{LIST_LIMIT} of {LIST_LIMIT + 2} memories shown; 2 more" in page.output


@pytest.mark.parametrize(
    "args",
    [
        ["episodes", "list", "--since", "yesterday"],
        ["episodes", "list", "--until", "2025-13-01"],
        ["episodes", "delete", "--before", "last week", "--yes"],
    ],
)
def test_a_malformed_time_is_a_usage_error_naming_its_option(migrated_url: str, args: list[str]) -> None:
    result = runner.invoke(app, [*args, "--db", migrated_url])
    assert result.exit_code == 2, result.output
    option = next(a for a in args if a.startswith("--") and a != "--yes")
    assert f"Invalid value for {option}" in result.output and "ISO 8601" in result.output
