"""``memabra memories update|retire|restore`` as a support engineer uses them on a ticket: an edit
keeps one current value per subject, and the history says who changed what and why."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import upgrade

runner = CliRunner(env={"COLUMNS": "200"})


def run(*args: str) -> Any:
    return runner.invoke(app, ["memories", *args])


@pytest.fixture
def url(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def _rows(url: str) -> dict[str, dict[str, Any]]:
    result = run("list", "--user", "ann", "--db", url, "--json", "-")
    assert result.exit_code == 0, result.output
    return {r["text"]: r for r in json.loads(result.stdout)}


def _history(url: str, memory_id: str) -> list[dict[str, Any]]:
    result = run("history", memory_id, "--user", "ann", "--db", url, "--json", "-")
    assert result.exit_code == 0, result.output
    changes: list[dict[str, Any]] = json.loads(result.stdout)
    return changes


def test_update_never_leaves_two_current_values_of_a_subject(url: str) -> None:
    for fact in ("I live in Hobart", "I'm planning to move to Oslo", "My dog is called Rex"):
        assert run("add", fact, "--user", "ann", "--db", url).exit_code == 0
    rows = _rows(url)
    hobart, plan = rows["I live in Hobart"]["id"], rows["I'm planning to move to Oslo"]["id"]

    refused = run("update", plan, "I live in Oslo", "--user", "ann", "--db", url)
    assert refused.exit_code == 1 and "contradicts the current" in refused.output and hobart in refused.output
    assert "--replace" in refused.output and "Traceback" not in refused.output
    assert {t for t, r in _rows(url).items() if r["status"] == "active"} == {
        "I live in Hobart",
        "I'm planning to move to Oslo",
        "My dog is called Rex",
    }

    done = run("update", plan, "I live in Oslo", "--user", "ann", "--db", url, "--replace", "--reason", "ticket 4182")
    assert done.exit_code == 0, done.output
    assert f"retired {hobart} (superseded by {plan})" in done.output
    rows = _rows(url)
    assert {t for t, r in rows.items() if r["status"] == "active"} == {"I live in Oslo", "My dog is called Rex"}
    assert rows["I live in Hobart"]["superseded_by"] == plan
    assert _history(url, plan)[-1]["reason"] == "ticket 4182"

    both = run("update", plan, "I live in Hobart", "--user", "ann", "--db", url, "--replace", "--keep-both")
    assert both.exit_code == 1 and "exclude each other" in both.output


def test_changes_keep_who_made_them_and_why(url: str) -> None:
    assert run("add", "I'm vegetarian", "--user", "ann", "--db", url).exit_code == 0
    veg = _rows(url)["I'm vegetarian"]["id"]
    by = ("--by", "sam (support)")
    assert run("retire", veg, "--user", "ann", "--db", url, "--reason", "user never said this", *by).exit_code == 0
    assert run("restore", veg, "--user", "ann", "--db", url, *by).exit_code == 0
    assert run("update", veg, "I'm vegan", "--user", "ann", "--db", url, *by).exit_code == 0
    reasons = [(c["action"], c["reason"]) for c in _history(url, veg)]
    assert reasons[1:] == [
        ("retired", "user never said this (by sam (support))"),
        ("restored", "restored by hand (by sam (support))"),
        ("updated", "updated by hand (by sam (support))"),
    ]
