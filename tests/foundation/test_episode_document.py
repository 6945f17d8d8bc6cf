"""The episode document a support engineer attaches to a ticket (``memabra episodes show ID --json
FILE``, the admin's "Download JSON"): self-describing, complete enough to debug the turn or load it
back from the file alone, times in UTC, payloads within the log's caps with each cut named, and
what the log blanked (a forgotten memory's text) still blank."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from factories import episode
from logged_world import Stopper
from memabra import (
    Budget,
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    FeedbackKind,
    RoutingContext,
    Step,
    StepKind,
    episode_from_document,
)
from memabra._cli import app
from memabra._document_cuts import cut_for_document
from memabra._episode_document import EPISODE_FORMAT, episode_document
from memabra._errors import InvalidRecordError
from memabra._feedback import RewardService
from memabra._log_caps import ARGUMENTS_CUT_KEY, MAX_LOGGED_TEXT, cut_text, left_out
from memabra._paused_turns import FAILED_TURN_SOURCE
from memabra.storage import EpisodeLog
from memabra.storage._memories import forget_in_log

runner = CliRunner(env={"COLUMNS": "120"})

# a turn logged at 16:30 in UTC+2: the document says 14:30 UTC
BERLIN = timezone(timedelta(hours=2))
AT = datetime(2025, 6, 1, 16, 30, tzinfo=BERLIN)


def _failed_turn() -> object:
    steps = (
        Step(StepKind.MODEL, "gpt", seq=0, input_tokens=120, output_tokens=9, latency_ms=40.0, started_at=AT),
        Step(
            StepKind.TOOL,
            "query_db",
            seq=1,
            arguments={"sql": "select * from orders", "limit": 5},
            result="3 rows: 1, 2, 3",
            latency_ms=12.5,
            started_at=AT,
        ),
        Step(
            StepKind.TOOL,
            "send_mail",
            seq=2,
            arguments={"to": "ann@example.com"},
            status="error",
            error="SMTPError: relay refused",
            started_at=AT,
        ),
    )
    ep = episode(steps=steps, created_at=AT)
    comment = "tool_error (send_mail): SMTPError: relay refused"
    failed = Feedback(
        ep.id, FeedbackKind.PROGRAMMATIC, FAILED_TURN_SOURCE, {"accepted": False, "comment": comment}, received_at=AT
    )
    return replace(ep, feedback=(failed,))


def _show_json(url: str, episode_id: str, out: Path) -> dict:  # type: ignore[type-arg]
    shown = runner.invoke(app, ["episodes", "show", episode_id, "--json", str(out), "--db", url])
    assert shown.exit_code == 0, shown.output
    return json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


def test_the_document_holds_the_whole_turn_in_utc(migrated_url: str, tmp_path: Path) -> None:
    ep = _failed_turn()
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(ep)  # type: ignore[arg-type]
        logged = log.get_episode(ep.id)  # type: ignore[attr-defined]
    doc = _show_json(migrated_url, logged.id, tmp_path / "ep.json")
    assert doc["format"] == EPISODE_FORMAT == "memabra.episode/1"
    assert doc["exported_at"].endswith("+00:00")
    assert doc["created"] == "2025-06-01T14:30:00+00:00"
    # the steps, with what a tool was called with and what it returned
    model, query, mail = doc["steps"]
    assert (model["input_tokens"], model["output_tokens"], model["started_at"]) == (
        120,
        9,
        "2025-06-01T14:30:00+00:00",
    )
    assert query["arguments"] == {"sql": "select * from orders", "limit": 5}
    assert query["result"] == "3 rows: 1, 2, 3" and query["seq"] == 1
    assert mail["arguments"] == {"to": "ann@example.com"} and mail["error"] == "SMTPError: relay refused"
    # why it failed, as `episodes list --json` names it
    assert doc["failed"] is True and doc["failure_cause"] == "tool_error"
    [feedback] = doc["feedback"]
    assert feedback["received_at"] == "2025-06-01T14:30:00+00:00" and feedback["id"] == ep.feedback[0].id
    # every candidate, chosen or not, with what the router saw, and each slot's whole distribution
    [decision] = doc["decisions"]
    sel = logged.selections[0]
    assert decision["created_at"].endswith("+00:00") and decision["latency_ms"] == sel.latency_ms
    assert decision["context"] == {
        "kinds": ["memory"],
        "max_tokens": 2000,
        "slots": {"memory": 5, "skill": 2, "tool": 3},
    }
    m1 = next(c for c in decision["candidates"] if c["id"] == "m1")
    assert m1["chosen"] is False and m1["features"] == {"sim": 0.5} and m1["metadata"] == {"source": "test"}
    assert [s["candidate_ids"] for s in decision["slots"]] == [list(d.candidate_ids) for d in sel.slots]
    assert [s["probabilities"] for s in decision["slots"]] == [list(d.probabilities) for d in sel.slots]
    # the reward as stored: its components and weights, not only their products
    reward = doc["reward"]
    assert reward["components"] == logged.reward.components.as_dict()
    assert reward["weights"] == logged.reward.weights.as_dict()
    assert doc["cut"] == []


def test_the_document_reads_back_as_the_logged_episode(migrated_url: str, tmp_path: Path) -> None:
    ep = _failed_turn()
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(ep)  # type: ignore[arg-type]
        logged = log.get_episode(ep.id)  # type: ignore[attr-defined]
    doc = _show_json(migrated_url, logged.id, tmp_path / "ep.json")
    assert episode_from_document(doc) == logged
    # a colleague's scratch log holds the same turn, from the file alone
    scratch = f"sqlite:///{tmp_path / 'scratch.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", scratch]).exit_code == 0
    with EpisodeLog(scratch) as other:
        RewardService(other).record(episode_from_document(doc))
    again = _show_json(scratch, logged.id, tmp_path / "again.json")
    assert {k: v for k, v in again.items() if k not in ("exported_at", "reward")} == {
        k: v for k, v in doc.items() if k not in ("exported_at", "reward")
    }


def test_a_file_that_is_no_episode_document_is_refused_by_name() -> None:
    with pytest.raises(InvalidRecordError, match="not an episode document: its format is 'memabra.decision/1'"):
        episode_from_document({"format": "memabra.decision/1"})
    doc = episode_document(episode())
    del doc["steps"]
    with pytest.raises(InvalidRecordError, match="has no 'steps'"):
        episode_from_document(doc)


ANSWER = "The answer starts here. " + "word " * 20_000 + "And it ends here."
RESULT = "first line\n" + "INFO fine\n" * 500_000 + "ERROR: disk full"
ARGUMENTS = {"path": "/var/log/app.log", "content": "y" * 300_000}


def test_an_old_turns_payloads_are_cut_as_the_log_cuts_them_each_cut_named() -> None:
    steps = (Step(StepKind.TOOL, "read_file", arguments=ARGUMENTS, status="error", result=RESULT, error=RESULT),)
    doc = episode_document(replace(episode(steps=steps), answer=ANSWER))
    text = json.dumps(doc)
    assert len(text) < 60_000, len(text)  # it was 10 MB
    [step] = doc["steps"]
    for value in (step["result"], step["error"], doc["answer"]):
        assert len(value) <= MAX_LOGGED_TEXT
    assert step["result"].startswith("first line\nINFO fine") and step["result"].endswith("ERROR: disk full")
    left = len(RESULT) - (MAX_LOGGED_TEXT - 2_200) - 2_000
    assert f"[memabra: {left:,} of {len(RESULT):,} characters not in this document (" in step["result"]
    assert step["arguments"]["path"] == "/var/log/app.log"
    assert "characters not in this document" in step["arguments"]["content"]
    assert {(c["path"], c["by"]) for c in doc["cut"]} == {
        ("answer", "document"),
        ("steps[0].arguments", "document"),
        ("steps[0].result", "document"),
        ("steps[0].error", "document"),
    }
    assert next(c for c in doc["cut"] if c["path"] == "steps[0].result")["left_out"] == left


def test_values_the_log_cut_are_kept_as_logged_and_named() -> None:
    logged = cut_text(RESULT)
    steps = (Step(StepKind.TOOL, "read_file", arguments={ARGUMENTS_CUT_KEY: cut_text("x" * 50_000)}, result=logged),)
    doc = episode_document(episode(steps=steps))
    assert doc["steps"][0]["result"] == logged
    assert doc["cut"] == [
        {"path": "steps[0].arguments", "by": "log", "left_out": (left_out(cut_text("x" * 50_000)) or (0,))[0]},
        {"path": "steps[0].result", "by": "log", "left_out": (left_out(logged) or (0,))[0]},
    ]


def test_the_cut_never_exceeds_the_cap() -> None:
    for size in (MAX_LOGGED_TEXT + 1, 10**6):
        kept, left = cut_for_document("é" * size)
        assert len(kept) <= MAX_LOGGED_TEXT and left > 0
    assert cut_for_document("short") == ("short", 0)


def test_a_forgotten_memory_stays_blank_in_the_document(migrated_url: str, tmp_path: Path) -> None:
    ep = episode()
    secret = ep.selections[0].offered[0].candidate.text
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(ep)
        forget_in_log(log.engine, ep.user_id, ["m0"])
    doc = _show_json(migrated_url, ep.id, tmp_path / "ep.json")
    assert secret not in json.dumps(doc)
    m0 = next(c for c in doc["decisions"][0]["candidates"] if c["id"] == "m0")
    assert m0["text"] == "" and m0["metadata"] == {"forgotten": True}


def test_a_decision_over_every_kind_reads_back_in_the_order_it_was_offered(migrated_url: str, tmp_path: Path) -> None:
    # a router offers tools, skills and memories in the order it gathered them, ranked per kind:
    # the document sorted them by kind and rank, so the decision read back offered them otherwise
    k = CandidateKind
    offered = [
        Candidate("t1", k.TOOL, "send mail", 5),
        Candidate("s1", k.SKILL, "write politely", 5),
        Candidate("m1", k.MEMORY, "Ann lives in Lyon", 5),
        Candidate("m2", k.MEMORY, "Ann's dog is Rex", 5),
        Candidate("s2", k.SKILL, "answer in French", 5),
    ]
    budget = Budget(max_tokens=100, slots={k.MEMORY: 2, k.SKILL: 1, k.TOOL: 1})
    ctx = RoutingContext("mail Ann", "u1", kinds=(k.TOOL, k.MEMORY, k.SKILL), budget=budget)
    sel = Stopper(stop=0.2, seed=3).choose(ctx, offered)
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(Episode("u1", ctx.query, selections=(sel,), answer="sent"))
        logged = log.get_episode(log.list_episodes(limit=1).items[0].id)
    scored = logged.selections[0].offered
    order = [sc.candidate.id for sc in scored]
    by_kind_and_rank = sorted(scored, key=lambda sc: (sc.candidate.kind.value, sc.rank))
    assert order != [sc.candidate.id for sc in by_kind_and_rank]
    doc = _show_json(migrated_url, logged.id, tmp_path / "ep.json")
    assert [c["id"] for c in doc["decisions"][0]["candidates"]] == order
    assert episode_from_document(doc) == logged


def test_a_huge_value_holding_a_log_note_is_still_cut() -> None:
    # a turn logged before the caps, whose tool read a file holding a cut value (an exported
    # document, memabra's own output): the note inside did not make the 600,000 characters the log's cut
    huge = "start\n" + "x" * 300_000 + cut_text("y" * 20_000) + "z" * 300_000  # type: ignore[operator]
    steps = (Step(StepKind.TOOL, "read_file", arguments={"content": huge, "path": "a"}, result=huge, error=huge),)
    doc = episode_document(replace(episode(steps=steps), answer=huge))
    assert len(json.dumps(doc)) < 60_000
    [step] = doc["steps"]
    for value in (step["result"], step["error"], doc["answer"]):
        assert len(value) <= MAX_LOGGED_TEXT and "not in this document" in value
    assert len(step["arguments"]["content"]) <= MAX_LOGGED_TEXT
    assert {(c["path"], c["by"]) for c in doc["cut"]} == {
        ("answer", "document"),
        ("steps[0].arguments", "document"),
        ("steps[0].result", "document"),
        ("steps[0].error", "document"),
    }


def test_the_recipe_records_the_turn_in_a_new_scratch_log_as_it_was_logged(migrated_url: str, tmp_path: Path) -> None:
    # what memabra._episode_file and the README tell a colleague to run: a new file, reward and
    # finality as logged (RewardService.record scored the reward afresh and left it provisional)
    from memabra.storage import open_log

    ep = _failed_turn()
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(ep, final=True)  # type: ignore[arg-type]
        logged = log.get_episode(ep.id)  # type: ignore[attr-defined]
    doc = _show_json(migrated_url, logged.id, tmp_path / "ep.json")
    url = f"sqlite:///{tmp_path / 'scratch.db'}"  # no file yet: open_log creates it with its schema
    with open_log(url) as scratch:
        scratch.log_episode(episode_from_document(doc))
        assert scratch.get_episode(logged.id) == logged
    again = _show_json(url, logged.id, tmp_path / "again.json")
    assert {k: v for k, v in again.items() if k != "exported_at"} == {
        k: v for k, v in doc.items() if k != "exported_at"
    }
    assert again["reward"]["final"] is True and again["finalized_at"] == doc["finalized_at"] is not None


def test_a_body_the_scratch_log_never_held_says_why_not_deleted_by_hand(migrated_url: str, tmp_path: Path) -> None:
    # a chosen skill names the digest of its body; a log the episode was recorded into from a
    # document never registered that body: the note named only a hand deletion
    k = CandidateKind
    skill = Candidate("s1", k.SKILL, "write politely", 5, metadata={"body_digest": "0123456789abcdef"})
    budget = Budget(max_tokens=100, slots={k.MEMORY: 0, k.SKILL: 1, k.TOOL: 0})
    ctx = RoutingContext("mail Ann", "u1", kinds=(k.SKILL,), budget=budget)
    sel = Stopper(stop=0.0, seed=3).choose(ctx, [skill])
    assert [c.id for c in sel.chosen] == ["s1"]
    with EpisodeLog(migrated_url) as log:
        RewardService(log).record(Episode("u1", ctx.query, selections=(sel,), answer="sent"))
        episode_id = log.list_episodes(limit=1).items[0].id
    [injected] = _show_json(migrated_url, episode_id, tmp_path / "ep.json")["decisions"][0]["injected"]
    assert injected["body_status"] == "missing"
    assert "recorded from an episode document or export into another log" in injected["note"]
