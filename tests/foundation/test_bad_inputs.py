"""What PostgreSQL refuses, checked the same way on both backends, and feedback validated at
every entry point (the record, the reward service, the CLI). Runs on SQLite always and on
PostgreSQL when ``MEMABRA_TEST_DATABASE_URL`` is set."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select
from typer.testing import CliRunner

from factories import candidates, episode, uniform_selection
from memabra import (
    Candidate,
    CandidateKind,
    Episode,
    Feedback,
    FeedbackError,
    FeedbackSignals,
    InvalidFeedbackError,
    InvalidRecordError,
    RewardWeights,
    Step,
    StepKind,
    UnknownEpisodeError,
    UnknownSnapshotError,
)
from memabra._cli import app
from memabra._feedback import RewardService, recompute_rewards
from memabra._records import PolicySnapshot, RegistryItem, utcnow
from memabra._reward import RewardConfig
from memabra.storage import EpisodeLog
from memabra.storage._models import EpisodeRow, FeedbackRow


def _count(log: EpisodeLog, model: type) -> int:
    with log.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(model)).scalar() or 0)


# ---------------------------------------------------------------- feedback payloads


BAD = {"rating": 99, "bogus": 1}


def test_the_record_refuses_a_bad_payload_naming_the_key() -> None:
    with pytest.raises(InvalidFeedbackError, match="unknown feedback key 'bogus'"):
        Feedback("e1", "explicit", "user", BAD)
    with pytest.raises(InvalidFeedbackError, match="'rating' must be an integer from 1 to 5, got 99"):
        Feedback("e1", "explicit", "user", {"rating": 99})
    # the named error is both a FeedbackError and an InvalidRecordError, as callers catch either
    assert issubclass(InvalidFeedbackError, FeedbackError) and issubclass(InvalidFeedbackError, InvalidRecordError)


def test_signals_are_typed_and_round_trip() -> None:
    fb = Feedback("e1", "implicit", "memabra", {"used_ids": ["m1"], "repeat": True, "rating": 4, "final": True})
    assert fb.signals.implicit.used_ids == ("m1",) and fb.signals.implicit.repeat is True
    assert fb.signals.explicit.rating == 4 and fb.signals.final is True
    assert FeedbackSignals.parse(dict(fb.payload)) == fb.signals
    again = Feedback.of("e1", "explicit", "user", fb.signals)
    assert again.signals == fb.signals


def test_the_reward_service_and_the_log_refuse_bad_payloads(log: EpisodeLog) -> None:
    svc = RewardService(log)
    ep = episode()
    svc.record(ep)
    with pytest.raises(InvalidFeedbackError):
        svc.post_feedback(Feedback(ep.id, "explicit", "user", BAD))
    assert _count(log, FeedbackRow) == 0


def test_the_cli_refuses_a_bad_payload(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        ep = episode()
        RewardService(log).record(ep)
    result = CliRunner().invoke(app, ["feedback", "--db", migrated_url, ep.id, json.dumps(BAD)])
    assert result.exit_code == 1, result.output
    assert "bogus" in result.output and "Traceback" not in result.output


def test_a_poisoned_row_does_not_stop_finalisation_of_the_others(log: EpisodeLog) -> None:
    svc = RewardService(log, RewardConfig(feedback_window=timedelta(minutes=1)))
    eps = [episode() for _ in range(3)]
    for ep in eps:
        svc.record(ep)
    # A row written before payloads were validated (or by hand): the record refuses to read it.
    with log.engine.begin() as conn:
        conn.execute(
            insert(FeedbackRow.__table__),  # type: ignore[arg-type]
            [
                {
                    "id": "poison",
                    "episode_id": eps[1].id,
                    "decision_id": None,
                    "kind": "explicit",
                    "source": "old",
                    "payload": BAD,
                    "idempotency_key": "poison",
                    "received_at": utcnow(),
                    "late": False,
                }
            ],
        )
    closed = svc.finalize_due(utcnow() + timedelta(minutes=2))
    assert closed == 2
    assert log.get_reward(eps[0].id) is not None and log.due_episode_ids(utcnow() + timedelta(minutes=2)) == [eps[1].id]


def _poison(log: EpisodeLog, episode_ids: list[str]) -> None:
    """Feedback rows written before payloads were validated: the record refuses to read them."""
    with log.engine.begin() as conn:
        conn.execute(
            insert(FeedbackRow.__table__),  # type: ignore[arg-type]
            [
                {
                    "id": f"p{episode_id[:30]}",
                    "episode_id": episode_id,
                    "decision_id": None,
                    "kind": "explicit",
                    "source": "old",
                    "payload": BAD,
                    "idempotency_key": f"p{episode_id[:30]}",
                    "received_at": utcnow(),
                    "late": False,
                }
                for episode_id in episode_ids
            ],
        )


def test_more_poisoned_rows_than_a_step_closes_do_not_stall_finalisation(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The oldest windows are unscoreable and outnumber both a page and a step's limit: every
    step still closes good episodes behind them, and each bad one is logged once."""
    monkeypatch.setattr("memabra._feedback._DUE_PAGE", 2)
    svc = RewardService(log, RewardConfig(feedback_window=timedelta(minutes=1)))
    eps = [episode() for _ in range(8)]
    for ep in eps:  # logged in order, so the first five windows end first
        svc.record(ep)
    _poison(log, [ep.id for ep in eps[:5]])
    later = utcnow() + timedelta(minutes=2)
    with caplog.at_level("ERROR", logger="memabra"):
        assert svc.finalize_due(later, limit=2) == 2
        assert svc.finalize_due(later, limit=2) == 1
        assert svc.finalize_due(later, limit=2) == 0
    assert all(log.get_reward(ep.id) is not None and log.get_episode(ep.id).finalized_at for ep in eps[5:])
    assert sorted(log.due_episode_ids(later)) == sorted(ep.id for ep in eps[:5])
    failures = [r for r in caplog.records if "could not be finalised" in r.getMessage()]
    assert len(failures) == 5


def test_due_episodes_page_by_window_end_then_id(log: EpisodeLog) -> None:
    svc = RewardService(log, RewardConfig(feedback_window=timedelta(minutes=1)))
    eps = [episode() for _ in range(5)]
    for ep in eps:
        svc.record(ep)
    later = utcnow() + timedelta(minutes=2)
    everything = log.due_episode_ids(later)
    assert sorted(everything) == sorted(ep.id for ep in eps)
    first, second = log.due_episode_ids(later, limit=2), log.due_episode_ids(later, limit=2, after=everything[1])
    assert first + second == everything[:4]
    assert log.due_episode_ids(later, after=everything[-1]) == []


def test_rewards_finalize_closes_every_due_episode_and_names_what_it_could_not(
    log: EpisodeLog, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("memabra._feedback.FINALIZE_BATCH", 2)
    svc = RewardService(log, RewardConfig(feedback_window=timedelta(seconds=0)))
    eps = [episode() for _ in range(5)]
    for ep in eps:
        svc.record(ep)
    _poison(log, [eps[0].id])
    result = CliRunner().invoke(app, ["rewards", "finalize", "--db", migrated_url])
    assert result.exit_code == 1, result.output
    assert "finalised 4 episodes" in result.output
    assert "1 episode(s) past their window could not be finalised" in result.output
    assert log.due_episode_ids() == [eps[0].id]


def test_feedback_and_its_reward_commit_together(log: EpisodeLog) -> None:
    """A scorer that fails after the feedback row was written leaves neither behind."""
    svc = RewardService(log)
    ep = episode()
    svc.record(ep)

    def exploding(_: Episode) -> object:
        raise RuntimeError("scorer died")

    with pytest.raises(RuntimeError, match="scorer died"):
        log.add_feedback(Feedback(ep.id, "explicit", "user", {"rating": 5}, idempotency_key="k1"), exploding)  # type: ignore[arg-type]
    assert _count(log, FeedbackRow) == 0
    # the retry with the same key is applied, not taken for a duplicate
    receipt = svc.post_feedback(Feedback(ep.id, "explicit", "user", {"rating": 5}, idempotency_key="k1"))
    assert receipt.status == "stored"
    reward = log.get_reward(ep.id)
    assert reward is not None and reward.components.s == 1.0


# ---------------------------------------------------------------- text, ids and integers


def test_nul_bytes_and_lone_surrogates_are_cleaned_on_both_backends(log: EpisodeLog) -> None:
    dirty = "Ann\x00 lives in \ud800Paris"
    cands = [
        Candidate("m0", CandidateKind.MEMORY, "memory\x00 text", 5, {"note": "a\x00b", "k\x00": "\udfff"}),
        *candidates(n=3)[1:],
    ]
    sel = uniform_selection("u1", cands, ["m0"], query=dirty)
    step = Step(StepKind.TOOL, "search", arguments={"q": "x\x00y", "nested": ["\ud83d"]}, result="r\x00", error=None)
    ep = Episode(user_id="u1", query=dirty, selections=(sel,), steps=(step,), answer="ok\x00", metadata={"m": "\x00"})
    log.log_episode(ep)
    back = log.get_episode(ep.id)
    assert back.query == "Ann lives in \ufffdParis" and back.answer == "ok"
    assert back.steps[0].arguments == {"q": "xy", "nested": ["\ufffd"]} and back.steps[0].result == "r"
    offered = back.selections[0].offered[0].candidate
    assert offered.text == "memory text" and dict(offered.metadata) == {"note": "ab", "k": "\ufffd"}
    assert back.selections[0].context.query == "Ann lives in \ufffdParis"
    # a valid pair (an emoji) survives untouched
    ok = episode()
    ok = Episode(user_id="u1", query="hi \U0001f600", selections=ok.selections, answer="\U0001f600")
    log.log_episode(ok)
    assert log.get_episode(ok.id).answer == "\U0001f600"


def test_dirty_feedback_text_is_cleaned(log: EpisodeLog) -> None:
    svc = RewardService(log)
    ep = episode()
    svc.record(ep)
    svc.post_feedback(
        Feedback(ep.id, "explicit", "user", {"comment": "bad\x00 \udc00", "correction": "I live in\x00 Rome"})
    )
    stored = log.feedback_for(ep.id)[0]
    assert stored.signals.explicit.comment == "bad \ufffd" and stored.signals.explicit.correction == "I live in Rome"


def test_ids_longer_than_their_column_are_refused_and_nothing_is_written(log: EpisodeLog) -> None:
    long_user = "u" * 201
    with pytest.raises(InvalidRecordError, match=r"user_id holds at most 200 characters, got 201"):
        log.log_episode(episode(user_id=long_user))
    # refused where the record is built, before a turn runs (the log would refuse it too)
    with pytest.raises(InvalidRecordError, match=r"Candidate.id holds at most 200"):
        Candidate("c" * 201, CandidateKind.MEMORY, "t", 1)
    with pytest.raises(InvalidRecordError, match=r"Feedback.idempotency_key holds at most 200"):
        Feedback("e1", "explicit", "user", {"rating": 4}, idempotency_key="k" * 201)
    # ids the records do not bound are refused by the log, naming table and column
    with pytest.raises(InvalidRecordError, match=r"episodes.policy_version holds at most 100"):
        sel = uniform_selection("u1", candidates(n=2), ["m0"])
        log.log_episode(Episode(user_id="u1", query="q", selections=(replace(sel, policy_version="v" * 101),)))
    with pytest.raises(InvalidRecordError, match=r"steps.name holds at most 200"):
        log.log_episode(episode(steps=(Step(StepKind.TOOL, "t" * 201),)))
    assert _count(log, EpisodeRow) == 0
    with pytest.raises(InvalidRecordError, match=r"registry.id holds at most 200"):
        log.put_items([RegistryItem(CandidateKind.SKILL, "s" * 201, "", "a skill", 3)])
    with pytest.raises(InvalidRecordError, match=r"policy_snapshots.version holds at most 100"):
        log.save_snapshot(PolicySnapshot("p", "v" * 101, b"model"))


def test_integers_outside_their_column_are_refused(log: EpisodeLog) -> None:
    with pytest.raises(InvalidRecordError, match=r"episodes.turn is a 32-bit integer column; 2147483648 does not fit"):
        log.log_episode(episode(turn=2**31))
    huge = [Candidate("m0", CandidateKind.MEMORY, "t", 2**31), *candidates(n=2)[1:]]
    with pytest.raises(InvalidRecordError, match=r"tokens(_injected)? is a 32-bit integer column; 2147483648"):
        log.log_episode(Episode(user_id="u1", query="q", selections=(uniform_selection("u1", huge, ["m0"]),)))
    assert _count(log, EpisodeRow) == 0
    log.log_episode(episode(turn=2**31 - 1))  # the largest that fits is stored
    assert _count(log, EpisodeRow) == 1


def test_lookups_with_text_the_database_refuses_find_nothing(log: EpisodeLog) -> None:
    with pytest.raises(UnknownEpisodeError):
        log.get_episode("a\x00b")
    with pytest.raises(UnknownEpisodeError):
        log.get_selection("\ud800")
    with pytest.raises(UnknownSnapshotError):
        log.get_snapshot("v\x00")
    assert log.items("u\x00") == []
    assert recompute_rewards(log, RewardWeights()) == 0


def test_memory_lookups_with_a_nul_byte_find_what_the_write_stored(log: EpisodeLog) -> None:
    from memabra import SQLMemory

    memory = SQLMemory(log)
    stored = memory.remember("ann", "I live in Lyon")
    # a memory id with a NUL byte finds what was stored (PostgreSQL refused the lookup before)
    assert memory.get("ann", stored.id + "\x00").text == "I live in Lyon"
    assert [c.action for c in memory.history("ann", stored.id + "\x00")] == [
        c.action for c in memory.history("ann", stored.id)
    ]
    # a user id with one would be stored as "ann", another user: refused, never ann's memories
    # (tests/security/test_tenant_memories.py)
    for call in (lambda: memory.list("ann\x00"), lambda: memory.remember("ann\x00", "I live in Oslo")):
        with pytest.raises(InvalidRecordError, match="holds a NUL byte"):
            call()
    memory.forget("ann", stored.id + "\x00")
    assert memory.list("ann") == [] and memory.forget_all("ann") == 0


# ---------------------------------------------------------------- through the agent


def test_the_agent_logs_a_dirty_turn_and_refuses_bad_feedback(log: EpisodeLog) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from fakes import ScriptedChatModel
    from memabra._agent import create_memabra_agent
    from memabra.router import HybridRouter, Similarity

    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("Noted\x00, Ann.")]),
        tools=[],
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
    )
    agent.session.memory.remember("ann", "My name is Ann\x00 and I live in \ud800Lyon")
    out = agent.invoke(
        {"messages": [HumanMessage("Hi,\x00 I am Ann \udc00")]},
        {"configurable": {"thread_id": "t"}},
        context={"user_id": "ann"},
    )
    ep = log.get_episode(out["memabra_episode_id"])
    assert ep.query == "Hi, I am Ann \ufffd"
    with pytest.raises(InvalidFeedbackError, match="bogus"):
        agent.feedback(ep.id, rating=99, bogus=1)
    with pytest.raises(InvalidFeedbackError, match="'rating' must be an integer from 1 to 5"):
        agent.feedback(ep.id, rating=99)
    assert log.feedback_for(ep.id) == ()


def test_logging_an_episode_twice_is_refused_by_name(log: EpisodeLog) -> None:
    ep = episode()
    log.log_episode(ep)
    with pytest.raises(InvalidRecordError, match="already in the log, nothing was written"):
        log.log_episodes([episode(), ep])
    assert _count(log, EpisodeRow) == 1


def test_a_bad_row_late_in_a_bulk_batch_writes_nothing(log: EpisodeLog) -> None:
    # 60 episodes of 5 candidates: past COPY_MIN_ROWS, so PostgreSQL streams the batch through COPY
    # and meets the bad step after every episode, decision and candidate row was already sent.
    good = [episode(user_id=f"u{i}") for i in range(60)]
    bad = episode(steps=(Step(StepKind.TOOL, "t" * 201),))
    with pytest.raises(InvalidRecordError, match=r"steps.name holds at most 200"):
        log.log_episodes([*good, bad])
    assert _count(log, EpisodeRow) == 0
    log.log_episodes(good)  # the connection is usable again and the batch goes in whole
    assert _count(log, EpisodeRow) == 60
