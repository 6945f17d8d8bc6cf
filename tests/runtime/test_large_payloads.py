"""Large payloads in the episode log: a tool's result, error and arguments, a model's error and the
turn's answer are logged up to a named size with a note saying what was left out, while the model
and the caller see the whole of them (memabra._log_caps)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind
from memabra._agent import create_memabra_agent
from memabra._log_caps import (
    ARGUMENTS_CUT_KEY,
    MAX_LOGGED_ARGUMENT,
    MAX_LOGGED_TEXT,
    cut_arguments,
    cut_text,
    left_out,
)
from memabra._turns import model_step, tool_step
from memabra.router import HybridRouter
from memabra.storage import EpisodeLog

USER = {"user_id": "ann"}
BUDGET = Budget(max_tokens=2000, slots={CandidateKind.TOOL: 3})
_RNG = random.Random(7)
# a 2 MB web page: its start and end are distinct, so a test can tell which part was kept
PAGE = "<html>START " + "".join(_RNG.choice("abcdefgh \n") for _ in range(2_000_000)) + " END</html>"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page's HTML."""
    return PAGE


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {len(content)} characters to {path}"


@tool
def tail_log(name: str) -> str:
    """Read a log file; fails with the log's text."""
    raise ToolException("backend failed:\n" + PAGE)


tail_log.handle_tool_error = True


def _agent(log: EpisodeLog, lexical: Any, replies: list[Any]) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(replies=replies)
    agent = create_memabra_agent(
        model,
        tools=[fetch_page, write_file, tail_log],
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=BUDGET,
    )
    return agent, model


def _call(name: str, args: dict[str, Any], call_id: str = "c1") -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def _ask(agent: Any, text: str, thread: str = "t1") -> dict[str, Any]:
    return agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}, context=USER)


def _tool_steps(log: EpisodeLog, episode_id: str) -> list[Any]:
    return [s for s in log.get_episode(episode_id).steps if s.kind.value == "tool"]


def test_a_2_mb_tool_result_is_logged_cut_while_the_model_sees_it_whole(log: EpisodeLog, lexical: Any) -> None:
    agent, model = _agent(log, lexical, [_call("fetch_page", {"url": "https://x.test"}), AIMessage("Done.")])
    with agent:
        out = _ask(agent, "fetch the page https://x.test")
        shown = [m for m in model.calls[-1][0] if isinstance(m, ToolMessage)]
        assert [m.content for m in shown] == [PAGE]  # what the model read: all of it
        (step,) = _tool_steps(log, out["memabra_episode_id"])
    assert step.status == "ok" and step.result is not None
    assert len(step.result) <= MAX_LOGGED_TEXT
    assert step.result.startswith("<html>START ") and step.result.endswith(" END</html>")
    kept = len(step.result) - _note_length(step.result)  # characters of the page itself
    assert kept > MAX_LOGGED_TEXT * 3 // 4
    assert left_out(step.result) == (len(PAGE) - kept, len(PAGE))
    sha = hashlib.sha256(PAGE.encode()).hexdigest()[:16]
    assert f"of {len(PAGE):,} characters not logged ({len(PAGE.encode()):,} bytes UTF-8, sha256 {sha})" in step.result


def _note_length(text: str) -> int:
    start = text.index("\n[memabra: ")
    return text.index(")]\n", start) + 3 - start


def test_a_failed_tools_long_error_is_logged_cut(log: EpisodeLog, lexical: Any) -> None:
    agent, model = _agent(log, lexical, [_call("tail_log", {"name": "app.log"}), AIMessage("It failed.")])
    with agent:
        out = _ask(agent, "read the app log with tail_log")
        shown = [m for m in model.calls[-1][0] if isinstance(m, ToolMessage)]
        assert shown[0].status == "error" and PAGE in str(shown[0].content)
        (step,) = _tool_steps(log, out["memabra_episode_id"])
    assert step.status == "error" and step.error is not None
    assert len(step.error) <= MAX_LOGGED_TEXT and step.error.startswith("backend failed:")
    assert left_out(step.error) is not None


def test_large_arguments_keep_their_keys_and_the_tool_gets_them_whole(log: EpisodeLog, lexical: Any) -> None:
    content = "x" * 300_000
    agent, model = _agent(
        log, lexical, [_call("write_file", {"path": "a.txt", "content": content}), AIMessage("Written.")]
    )
    with agent:
        out = _ask(agent, "write the file a.txt with write_file")
        shown = [m for m in model.calls[-1][0] if isinstance(m, ToolMessage)]
        assert shown[0].content == "wrote 300000 characters to a.txt"
        (step,) = _tool_steps(log, out["memabra_episode_id"])
    assert step.arguments["path"] == "a.txt"
    logged = step.arguments["content"]
    assert isinstance(logged, str) and len(logged) <= MAX_LOGGED_ARGUMENT
    assert left_out(logged) is not None and left_out(logged)[1] == 300_000  # type: ignore[index]


def test_a_long_answer_is_logged_cut_and_returned_whole(log: EpisodeLog, lexical: Any) -> None:
    answer = "Here is the table:\n" + PAGE
    agent, _ = _agent(log, lexical, [AIMessage(answer)])
    with agent:
        out = _ask(agent, "make me the big table")
        assert out["messages"][-1].content == answer
        logged = log.get_episode(out["memabra_episode_id"]).answer
    assert logged is not None and len(logged) <= MAX_LOGGED_TEXT and logged.startswith("Here is the table:")
    assert left_out(logged) == (len(answer) - (len(logged) - _note_length(logged)), len(answer))


def test_a_models_long_error_is_cut() -> None:
    step = model_step("gpt", 1.0, None, None, status="error", error="HTTPError: 500\n" + PAGE)
    assert step.error is not None and len(step.error) <= MAX_LOGGED_TEXT and step.error.startswith("HTTPError")


def test_cutting_is_bounded_idempotent_and_keeps_different_payloads_apart() -> None:
    assert cut_text("short") == "short" and cut_text(None) is None
    whole = "a" * MAX_LOGGED_TEXT
    assert cut_text(whole) == whole  # at the limit: kept whole
    once = cut_text(PAGE)
    assert once is not None and len(once) <= MAX_LOGGED_TEXT and cut_text(once) == once
    # two payloads alike but for one character in the part left out are logged differently
    other = PAGE[:1_000_000] + ("b" if PAGE[1_000_000] != "b" else "c") + PAGE[1_000_001:]
    assert cut_text(other) != once
    # arguments: many short values (a bulk insert) are logged as their JSON, cut
    rows = {"rows": [{"id": i, "name": f"n{i}"} for i in range(20_000)]}
    cut = cut_arguments(rows)
    assert list(cut) == [ARGUMENTS_CUT_KEY] and left_out(cut[ARGUMENTS_CUT_KEY]) is not None
    assert cut_arguments({"rows": rows["rows"][:-1]}) != cut
    small = {"city": "Lyon"}
    assert cut_arguments(small) is small


@pytest.mark.parametrize("same", [True, False])
def test_repeated_failed_calls_read_the_same_after_cutting(same: bool) -> None:
    """The reward's "repeating a failed action" check compares logged arguments: cut arguments
    compare as the whole ones did (equal when equal, different when they differ past the cut)."""
    big = "q" * 100_000
    first = {"sql": big + "1"}
    second = {"sql": big + ("1" if same else "2")}
    steps = [
        tool_step("run_sql", a, result=None, status="error", error="boom", latency_ms=1.0) for a in (first, second)
    ]
    assert (steps[0].arguments == steps[1].arguments) is same
