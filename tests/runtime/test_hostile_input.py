"""What a chat user, a model or a client may paste: numbers no float holds, values nested past the
interpreter's depth, user ids that are not text, the same fact in another Unicode normalisation,
names that differ only by case. Each is stored faithfully or refused by name, on both backends,
with nothing half-written and no turn left running."""

from __future__ import annotations

import unicodedata
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from sqlalchemy import func, select

from fakes import ScriptedChatModel
from memabra import (
    Budget,
    CandidateKind,
    Episode,
    Feedback,
    FeedbackSignals,
    InvalidFeedbackError,
    InvalidRecordError,
    RegistryItem,
    SQLMemory,
)
from memabra._agent import create_memabra_agent
from memabra._catalog import as_tools
from memabra._memory_records import MemoryStatus
from memabra._tool_search import _named
from memabra._turns import TOO_DEEP
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog
from memabra.storage._models import EpisodeRow, SuspendedTurnRow


def _nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    level = root
    for _ in range(depth):
        level["x"] = {}
        level = level["x"]
    return root


def _count(log: EpisodeLog, model: type) -> int:
    with log.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(model)).scalar() or 0)


# ---------------------------------------------------------------- feedback payloads


def test_a_number_no_float_holds_is_refused_by_key() -> None:
    # a JSON body's 400-digit integer raised OverflowError (a 500 at the feedback endpoint)
    with pytest.raises(InvalidFeedbackError, match=r"'success' must be a finite number .*\(401 characters\)"):
        FeedbackSignals.parse({"success": 10**400})
    with pytest.raises(InvalidFeedbackError, match="'correction_severity' must be a finite number"):
        FeedbackSignals.parse({"correction_severity": -(10**400)})


def test_non_finite_feedback_is_an_invalid_feedback_error() -> None:
    # it was an InvalidRecordError, which `except InvalidFeedbackError` (the documented one) misses
    for value in (float("nan"), float("inf")):
        with pytest.raises(InvalidFeedbackError, match=r"feedback 'success' must be a finite number"):
            Feedback("e1", "explicit", "api", {"success": value})


def test_values_nested_past_the_interpreters_depth_are_refused_by_name() -> None:
    deep = _nested(5000)
    with pytest.raises(InvalidFeedbackError, match="'comment' must be a text, got a dict nested too deeply to show"):
        Feedback("e1", "explicit", "api", {"comment": deep})
    with pytest.raises(InvalidRecordError, match="Episode.metadata is nested too deeply to be stored as JSON"):
        Episode(user_id="ann", query="q", metadata=deep)


# ---------------------------------------------------------------- memories


def test_remember_refuses_a_user_id_that_is_not_text(log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    for user in (7, None, b"ann"):
        with pytest.raises(InvalidRecordError, match="memories are scoped by user: give a non-empty user_id"):
            memory.remember(user, "I live in Oslo")  # type: ignore[arg-type]
    assert memory.list("7") == []


def test_a_fact_in_another_normalisation_is_a_restatement(log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    first = memory.remember("ann", "I live in Zürich")
    again = memory.remember("ann", unicodedata.normalize("NFD", "I live in Zürich"))
    records = memory.list("ann")
    # one memory, refreshed; before, the decomposed text retired the stored one as superseded
    assert again.id == first.id and [r.status for r in records] == [MemoryStatus.ACTIVE]
    assert records[0].text == "I live in Zürich" == unicodedata.normalize("NFC", records[0].text)
    name = memory.remember("ann", "My name is Jose\u0301")
    assert name.text == "My name is Jos\u00e9"


def test_a_memory_stored_decomposed_before_nfc_is_restated_not_retired(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a log written before memory text was composed holds "Zu\u0308rich" as typed; typed the same
    # way again, the composed fact must still restate it, not retire it as superseded by a new one
    import memabra._memory_text as memory_text  # where memory text is cleaned and composed

    memory = SQLMemory(log)
    decomposed = unicodedata.normalize("NFD", "My favourite dish is crème brûlée")
    with monkeypatch.context() as old_code:
        old_code.setattr(
            memory_text,
            "unicodedata",
            SimpleNamespace(normalize=lambda form, text: text, category=unicodedata.category),
        )
        stored = memory.remember("ann", decomposed)
    assert stored.text == decomposed
    again = memory.remember("ann", decomposed)
    records = memory.list("ann")
    assert again.id == stored.id and [r.status for r in records] == [MemoryStatus.ACTIVE]
    assert records[0].text == unicodedata.normalize("NFC", decomposed)


# ---------------------------------------------------------------- skills and tools


def test_names_that_differ_only_by_case_are_two_tools_and_a_request_names_each_exactly() -> None:
    # BFCL's registry holds calculate_BMI and calculate_bmi: real registries have such pairs
    @tool("calculate_BMI")
    def upper(weight: float, height: float) -> float:
        """Body mass index from weight in kg and height in m."""
        return weight / height**2

    @tool("calculate_bmi")
    def lower(weight: float, height: float) -> float:
        """Body mass index, rounded."""
        return round(weight / height**2)

    @tool
    def search_web(q: str) -> str:
        """Search the web for q."""
        return q

    tools = as_tools([upper, lower, search_web])
    assert [t.name for t in tools] == ["calculate_BMI", "calculate_bmi", "search_web"]
    pool = [RegistryItem(CandidateKind.TOOL, f"tool:{t.name}", "", t.name, 5, name=t.name) for t in tools]
    assert [i.name for i in _named(pool, "calculate_bmi")] == ["calculate_bmi"]
    assert [i.name for i in _named(pool, "calculate_BMI")] == ["calculate_BMI"]
    assert _named(pool, "CALCULATE_BMI") == []  # either could be meant: neither is fetched by name
    assert [i.name for i in _named(pool, "SEARCH_WEB")] == ["search_web"]  # one spelling: found


# ---------------------------------------------------------------- through the agent


@tool
def lookup(q: str) -> str:
    """Look up q."""
    return "found"


@pytest.mark.parametrize("depth", [900, 3000])
def test_tool_arguments_nested_thousands_deep_are_logged_not_crashing_the_turn(log: EpisodeLog, depth: int) -> None:
    args = {"q": _nested(depth)}
    model = ScriptedChatModel(
        replies=[AIMessage("", tool_calls=[{"name": "lookup", "args": args, "id": "c1"}]), AIMessage("done")]
    )
    with create_memabra_agent(
        model,
        tools=[lookup],
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=Budget(max_tokens=1000, slots={CandidateKind.TOOL: 1}),
        learn=False,
    ) as agent:
        out = agent.invoke(
            {"messages": [HumanMessage("look it up")]},
            {"configurable": {"thread_id": "t"}},
            context={"user_id": "ann"},
        )
    # before: a RecursionError out of invoke, no episode, and the turn kept as running
    assert _count(log, EpisodeRow) == 1 and _count(log, SuspendedTurnRow) == 0
    (step,) = [s for s in log.get_episode(out["memabra_episode_id"]).steps if s.name == "lookup"]
    assert step.status == "error"
    level: Any = step.arguments["q"]
    for _ in range(63):
        level = level["x"]
    assert level == TOO_DEEP


def test_a_run_user_id_is_text_an_integer_or_a_uuid_and_anything_else_is_refused_by_type(log: EpisodeLog) -> None:
    import uuid

    model = ScriptedChatModel(replies=[AIMessage("hello")] * 4)
    someone = uuid.UUID("12345678-1234-5678-1234-567812345678")
    with create_memabra_agent(
        model, db=log, router=HybridRouter(similarity=Similarity(encoder=None)), learn=False
    ) as agent:
        for given, stored in ((0, "0"), (42, "42"), (someone, str(someone))):
            out = agent.invoke(
                {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}}, context={"user_id": given}
            )
            assert log.get_episode(out["memabra_episode_id"]).user_id == stored
        for bad in ({"id": 1}, object(), True, 1.5):
            # its text (a dict's, an object's memory address) would be another user in every process
            with pytest.raises(
                InvalidRecordError, match=rf"user_id must be a string, an integer or a UUID, got {type(bad).__name__}"
            ):
                agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t2", "user_id": bad}})
    assert _count(log, EpisodeRow) == 3
