"""The session's candidate pool and its input checks: a session offers only the skills and tools it
was built with (plus the user's memories), whatever else the shared registry holds; feedback names
a known kind and carries a signal."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from sqlalchemy.exc import OperationalError

from fakes import ScriptedChatModel
from memabra._agent import MemabraAgent, create_memabra_agent
from memabra._catalog import Skill
from memabra._context import assemble
from memabra._errors import InvalidFeedbackError, RouterError
from memabra._feedback import RewardService
from memabra._learner import Learner
from memabra._records import Feedback, FeedbackKind
from memabra.router import HybridRouter, Similarity
from memabra.storage import DatabaseUnavailableError, EpisodeLog, make_engine

USER = {"user_id": "ann"}


@tool
def delete_account(user: str) -> str:
    """Delete the user's account permanently."""
    return "deleted"


def _agent(log: EpisodeLog, replies: list[AIMessage], tools: list[Any], skills: Sequence[Skill] = ()) -> MemabraAgent:
    return create_memabra_agent(
        ScriptedChatModel(replies=replies),
        tools=tools,
        skills=skills,
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        learn=False,
    )


def _ask(agent: MemabraAgent, text: str, thread: str = "t1") -> str:
    out = agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context=USER)
    return str(out["memabra_episode_id"])


def test_two_apps_on_one_database_offer_only_their_own_tools_and_skills(migrated_url: str, tools: list[Any]) -> None:
    get_weather, convert_units, _ = tools
    pirate = Skill("pirate", "talk like a pirate", "Arr!")
    with EpisodeLog(migrated_url) as log_v1, EpisodeLog(migrated_url) as log_v2:
        v1 = _agent(log_v1, [AIMessage("ok")], [get_weather, delete_account], [pirate])
        first = log_v1.get_episode(_ask(v1, "weather in Paris, pirate style, then delete my account"))
        v1.close()
        v2 = _agent(log_v2, [AIMessage("ok")], [convert_units])
        v2.session.memory.remember("ann", "I live in Lyon")
        ep = log_v2.get_episode(_ask(v2, "weather in Paris? also delete my account; talk like a pirate"))
        v2.close()
        offered = {sc.candidate.id for sc in ep.selections[0].offered}
        assert offered - {i.id for i in v2.session.memory.items("ann")} == {"tool:convert_units"}
        assert set(ep.selections[0].chosen_ids) <= offered
        # v1's items keep their rows and what the log learned of them, for when v1 runs again
        registry = {i.id: i for i in log_v2.items("ann")}
        assert {"skill:pirate", "tool:get_weather", "tool:delete_account"} <= registry.keys()
        v1_again = _agent(log_v1, [AIMessage("ok")], [get_weather, delete_account], [pirate])
        again = log_v1.get_episode(_ask(v1_again, "weather in Paris, pirate style", thread="t2"))
        v1_again.close()
        offered_again = [sc.candidate for sc in again.selections[0].offered]
        assert {c.id for c in offered_again} == {"skill:pirate", "tool:get_weather", "tool:delete_account"} | {
            i.id for i in v2.session.memory.items("ann")
        }
        chosen_before = set(first.selections[0].chosen_ids)
        assert chosen_before & {"skill:pirate", "tool:get_weather"}
        assert all(c.usage.times_chosen >= 1 for c in offered_again if c.id in chosen_before)


def test_a_chosen_skill_or_tool_the_session_cannot_provide_is_a_router_error(log: EpisodeLog, tools: list[Any]) -> None:
    agent = _agent(log, [AIMessage("ok")], [tools[0]], [Skill("pirate", "talk like a pirate", "Arr!")])
    selection = log.get_episode(_ask(agent, "weather in Paris, pirate style")).selections[0]
    agent.close()
    assert {"skill:pirate", "tool:get_weather"} <= set(selection.chosen_ids)
    with pytest.raises(RouterError, match="'skill:pirate'.*not built with"):
        assemble(selection, {}, frozenset({"tool:get_weather"}))
    with pytest.raises(RouterError, match="'tool:get_weather'"):
        assemble(selection, agent.session.skills, frozenset())


def test_feedback_of_an_unknown_kind_or_with_no_signal_is_refused_and_nothing_stored(log: EpisodeLog) -> None:
    agent = _agent(log, [AIMessage("ok")], [])
    eid = _ask(agent, "hello")
    with pytest.raises(InvalidFeedbackError, match="kind must be one of explicit, implicit, programmatic; got 'weird'"):
        agent.feedback(eid, kind="weird", success=1.0)
    with pytest.raises(InvalidFeedbackError, match="carries no signal; give at least one of .*success"):
        agent.feedback(eid)
    with pytest.raises(InvalidFeedbackError, match="carries no signal"):
        agent.feedback(eid, final=False)
    # the CLI and the admin post through the same service
    with pytest.raises(InvalidFeedbackError, match="carries no signal"):
        RewardService(log).post_feedback(Feedback(eid, FeedbackKind.EXPLICIT, "cli", {}))
    assert log.feedback_for(eid) == ()
    assert agent.feedback(eid, kind="programmatic", accepted=True).status != "late"
    agent.close()


def test_a_correction_given_as_feedback_is_remembered_as_its_fact(log: EpisodeLog) -> None:
    """``feedback(correction="I moved to Oslo")`` updates the user's memory as a message saying
    it would (the README's first example); a correction stating no fact changes nothing, and a
    duplicate post writes nothing again."""
    agent = _agent(log, [AIMessage("ok")] * 3, [])
    first = _ask(agent, "I live in Lyon")
    assert [m.text for m in agent.session.memory.list("ann", include_retired=False)] == ["I live in Lyon"]
    eid = _ask(agent, "Do I need an umbrella tomorrow?")
    agent.feedback(eid, correct=False, correction="I moved to Oslo", idempotency_key="k1")
    current = [m.text for m in agent.session.memory.list("ann", include_retired=False)]
    assert current == ["I moved to Oslo"]
    agent.feedback(eid, correct=False, correction="I moved to Oslo", idempotency_key="k1")  # a retry
    assert len(agent.session.memory.list("ann")) == 2  # Lyon (retired) and Oslo: nothing added
    agent.feedback(first, correction="wrong tool")
    assert [m.text for m in agent.session.memory.list("ann", include_retired=False)] == current
    agent.close()


def test_a_failure_after_the_episode_is_logged_costs_the_caller_neither_its_id_nor_a_retry(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Storing the message's facts or the learner's step can fail once the episode is in the log
    (a memory store down, a lock held too long): the turn still returns its episode id, so a retry
    does not log the turn twice, and the log names what failed."""
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("ok")]), db=log, router=HybridRouter(similarity=Similarity(encoder=None))
    )

    def store_down(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("memory store unreachable")

    monkeypatch.setattr(agent.session.memory, "write_from_message", store_down)
    monkeypatch.setattr(agent.session, "learn_pending", store_down)
    with caplog.at_level("ERROR", logger="memabra"):
        eid = _ask(agent, "I live in Lyon")
        receipt = agent.feedback(eid, correct=False, correction="I moved to Oslo")
    assert log.get_episode(eid).query == "I live in Lyon" and receipt.status == "stored"
    assert f"episode {eid} is logged, but storing the facts of its message failed" in caplog.text
    assert "but storing the fact of its correction failed" in caplog.text
    assert "but the learner's step failed" in caplog.text
    agent.close()


def _refused() -> Exception:
    """What a step meets with the database down: a real connection refused, as the engine names it."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = make_engine(f"postgresql+psycopg://root@127.0.0.1:{port}/memabra")
    try:
        with engine.connect():
            pass
    except DatabaseUnavailableError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError("a port nothing listens on accepted a connection")


def _disconnect() -> Exception:
    """A connection the server ended under a statement, as SQLAlchemy marks it (``connection_invalidated``)."""
    reason = Exception("server closed the connection unexpectedly\n\tThis probably means the server terminated")
    return OperationalError("SELECT 1", {}, reason, connection_invalidated=True)


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (_refused, "cannot connect to the database postgresql+psycopg://root@127.0.0.1:"),
        (_disconnect, "Exception: server closed the connection unexpectedly"),
    ],
    ids=["refused", "disconnect"],
)
def test_a_learner_step_that_lost_the_database_logs_one_warning_line_per_turn(
    log: EpisodeLog,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: Callable[[], Exception],
    cause: str,
) -> None:
    """An outage fails the learner's step on every turn: each says so in one line naming the cause
    (the next step takes it again), not an ERROR with a traceback burying the log."""
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("ok")]), db=log, router=HybridRouter(similarity=Similarity(encoder=None))
    )
    raised = error()

    def lost(self: Learner, **kwargs: Any) -> Any:
        raise raised

    monkeypatch.setattr(Learner, "step", lost)
    with caplog.at_level("INFO", logger="memabra"):
        eids = [_ask(agent, f"hello {i}", thread=f"t{i}") for i in range(2)]
    failed = [r for r in caplog.records if "learner's step failed" in r.getMessage()]
    assert [r.levelname for r in failed] == ["WARNING", "WARNING"]
    for eid, record in zip(eids, failed, strict=True):
        message = record.getMessage()
        assert message.startswith(f"episode {eid} is logged, but the learner's step failed: {cause}"), message
        assert "\n" not in message and record.exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    agent.close()


def test_a_learner_step_that_failed_otherwise_logs_an_error_with_its_traceback(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An OperationalError on a live connection (a lock held too long) is no outage: it may be a
    bug, and its traceback says where."""
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("ok")]), db=log, router=HybridRouter(similarity=Similarity(encoder=None))
    )

    def locked(self: Learner, **kwargs: Any) -> Any:
        raise OperationalError("UPDATE learner_leases", {}, Exception("database is locked"))

    monkeypatch.setattr(Learner, "step", locked)
    with caplog.at_level("INFO", logger="memabra"):
        eid = _ask(agent, "hello")
    (failed,) = [r for r in caplog.records if "learner's step failed" in r.getMessage()]
    assert (
        failed.levelname == "ERROR" and failed.getMessage() == f"episode {eid} is logged, but the learner's step failed"
    )
    assert failed.exc_info is not None and isinstance(failed.exc_info[1], OperationalError)
    agent.close()


def test_a_session_reads_the_reward_weights_the_cli_reads(log: EpisodeLog, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """memabra.toml / $MEMABRA_REWARD_WEIGHTS weighted the CLI's rewards (feedback, finalize, the
    learner) but not an agent's: one log held rewards totalled under two weightings."""
    from memabra import RewardConfig, RewardWeights
    from memabra._build import build_session

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMABRA_REWARD_WEIGHTS", "wc=0.9")
    assert build_session(db=log, learn=False).rewards.config.weights.wc == 0.9
    given = RewardConfig(weights=RewardWeights(wc=0.2))
    assert build_session(db=log, learn=False, reward=given).rewards.config.weights.wc == 0.2


def test_a_router_name_or_a_skill_that_is_not_a_skill_is_a_config_error_naming_what_to_pass(log: EpisodeLog) -> None:
    """``router="vw"`` (the CLI's ``--policy vw``) and a skill written as a dict are the two shapes a
    newcomer tries first; each is refused naming what to pass, not an AttributeError from inside."""
    from memabra._build import build_session
    from memabra._errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"router must be a memabra\.router\.Router, such as VWRouter\(\) .*; got 'vw'"
    ):
        build_session(db=log, router="vw")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"skills must be memabra\.Skill\(name, description, body\).*got a dict"):
        build_session(db=log, skills=[{"name": "email-style", "description": "d", "body": "b"}])  # type: ignore[list-item]
    assert not log.closed  # a log the caller passed stays open
