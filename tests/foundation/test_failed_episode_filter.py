"""The episode listing filters failed turns, by why they failed: the failed-turn feedback the
runtime writes (its source and its comment's cause word), read in SQL on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from factories import episode
from memabra import Feedback, FeedbackKind
from memabra._cli import app
from memabra._errors import InvalidRecordError
from memabra._feedback import RewardService
from memabra._graph_steps import FAILED_TURN_SOURCE, failure_reason
from memabra._paused_turns import ABANDONED_SOURCE
from memabra._superseded import SUPERSEDED_REASON
from memabra.storage import EpisodeFilter, EpisodeLog
from memabra.storage._failures import FAILED_TURN_SOURCE as STORAGE_FAILED_SOURCE
from memabra.storage._failures import FAILURE_CAUSES, failure_cause

START = datetime(2025, 3, 1, 12, tzinfo=UTC)
runner = CliRunner()

# the comments the runtime writes, made by its own functions
COMMENTS = {
    "recursion_limit": failure_reason("recursion_limit", "GraphRecursionError: Recursion limit of 25 reached"),
    "model_error": failure_reason("model_error (chat-model)", "RateLimitError: 429 Too Many Requests"),
    "tool_error": failure_reason("tool_error (search_mail)", "TimeoutError: read timed out"),
    "superseded": SUPERSEDED_REASON,
}


def _failed(log: EpisodeLog, at: datetime, comment: str | None, *, source: str = FAILED_TURN_SOURCE) -> str:
    ep = episode("u1", created_at=at)
    payload: dict[str, object] = {"accepted": False}
    if comment is not None:
        payload["comment"] = comment
    failed = Feedback(ep.id, FeedbackKind.PROGRAMMATIC, source, payload, received_at=at)
    RewardService(log).record(replace(ep, feedback=(failed,)))
    return ep.id


def _ok(log: EpisodeLog, at: datetime) -> str:
    ep = episode("u1", created_at=at)
    RewardService(log).record(ep)
    return ep.id


def _listed(log: EpisodeLog, flt: EpisodeFilter, *, limit: int = 50) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = log.list_episodes(flt, cursor=cursor, limit=limit)
        ids += [e.id for e in page.items]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def test_storage_names_the_runtime_source_and_causes() -> None:
    assert STORAGE_FAILED_SOURCE == FAILED_TURN_SOURCE
    assert {failure_cause(c) for c in COMMENTS.values()} == set(FAILURE_CAUSES)
    assert failure_cause("model_errors happen") is None and failure_cause(None) is None


def test_failed_turns_are_listed_by_cause_on_every_page(log: EpisodeLog) -> None:
    made: dict[str, list[str]] = {cause: [] for cause in COMMENTS}
    ok: list[str] = []
    unnamed: list[str] = []
    at = START
    for i in range(24):
        at += timedelta(minutes=1)
        if i % 3 == 0:
            ok.append(_ok(log, at))
        elif i == 4:
            unnamed.append(_failed(log, at, None))  # a failed turn with no step to blame
        else:
            cause = list(COMMENTS)[i % 4]
            made[cause].append(_failed(log, at, COMMENTS[cause]))
    # a turn given up on by an operator, and feedback merely saying "model_error": not failed turns
    ok.append(_failed(log, at + timedelta(minutes=1), COMMENTS["model_error"], source=ABANDONED_SOURCE))
    ok.append(_failed(log, at + timedelta(minutes=2), "model_error: said a user", source="user"))
    failed = [i for ids in made.values() for i in ids] + unnamed
    listed = _listed(log, EpisodeFilter(failed=True), limit=4)  # several pages: the keyset holds
    assert sorted(listed) == sorted(failed) and len(listed) == len(set(listed))
    assert sorted(_listed(log, EpisodeFilter(failed=False), limit=4)) == sorted(ok)
    for cause, ids in made.items():
        assert sorted(_listed(log, EpisodeFilter(failure_cause=cause), limit=2)) == sorted(ids), cause
        assert sorted(_listed(log, EpisodeFilter(failed=True, failure_cause=cause))) == sorted(ids), cause
    # each row says whether and why it failed
    rows = {e.id: e for e in log.list_episodes(limit=100).items}
    assert all(rows[i].failed and rows[i].failure_cause == c for c, ids in made.items() for i in ids)
    assert rows[unnamed[0]].failed and rows[unnamed[0]].failure_cause is None
    assert not any(rows[i].failed for i in ok)
    assert log.list_episodes(EpisodeFilter(failed=True), limit=1, count=True).total == len(failed)


def test_a_cause_combines_with_the_other_filters(log: EpisodeLog) -> None:
    early = _failed(log, START, COMMENTS["model_error"])
    late = _failed(log, START + timedelta(hours=3), COMMENTS["model_error"])
    _failed(log, START + timedelta(hours=3, minutes=1), COMMENTS["tool_error"])
    since_two = EpisodeFilter(failure_cause="model_error", since=START + timedelta(hours=2))
    assert _listed(log, since_two) == [late]
    assert _listed(log, EpisodeFilter(failure_cause="model_error", until=START + timedelta(hours=1))) == [early]


def test_an_unknown_cause_is_refused_naming_the_causes(log: EpisodeLog) -> None:
    with pytest.raises(InvalidRecordError, match="recursion_limit, model_error, tool_error, superseded.*'timeout'"):
        log.list_episodes(EpisodeFilter(failure_cause="timeout"))
    with pytest.raises(InvalidRecordError, match="failed=False"):
        log.list_episodes(EpisodeFilter(failed=False, failure_cause="model_error"))


def test_the_cli_lists_failed_turns_by_cause(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        model = _failed(log, START, COMMENTS["model_error"])
        superseded = _failed(log, START + timedelta(minutes=1), COMMENTS["superseded"])
        ok = _ok(log, START + timedelta(minutes=2))

    def listed(*options: str) -> list[dict[str, object]]:
        out = runner.invoke(app, ["episodes", "list", *options, "--db", migrated_url, "--json", "-"])
        assert out.exit_code == 0, out.output
        return list(json.loads(out.stdout)["episodes"])

    rows = listed("--failed")
    assert [r["id"] for r in rows] == [superseded, model]
    assert [r["failure_cause"] for r in rows] == ["superseded", "model_error"] and all(r["failed"] for r in rows)
    assert [r["id"] for r in listed("--failed", "--cause", "model_error")] == [model]
    assert [r["id"] for r in listed("--cause", "superseded")] == [superseded]
    (kept,) = listed("--not-failed")
    assert kept["id"] == ok and kept["failed"] is False and kept["failure_cause"] is None
    table = runner.invoke(app, ["episodes", "list", "--failed", "--db", migrated_url], env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "superseded" in table.output and "model_error" in table.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--cause", "timeout"], "use one of recursion_limit, model_error, tool_error, superseded"),
        (["--not-failed", "--cause", "tool_error"], "leave out --not-failed"),
    ],
)
def test_the_cli_refuses_a_bad_cause_as_a_usage_error(migrated_url: str, options: list[str], message: str) -> None:
    out = runner.invoke(app, ["episodes", "list", *options, "--db", migrated_url], env={"COLUMNS": "250"})
    assert out.exit_code == 2, out.output
    assert message in " ".join(out.output.replace("│", " ").split())
