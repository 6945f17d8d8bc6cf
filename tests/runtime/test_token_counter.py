"""``SessionSettings.token_counter``: candidates cost the model's own tokens of what they put in the
prompt. The budget is enforced in them, the logged candidates carry them, skills and tools are
counted once per session and memories through a cache, and a counter that fails is refused by the
candidate it failed on before anything is written. Without one, every count is the estimate."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from fakes import ScriptedChatModel
from memabra._agent import create_memabra_agent
from memabra._build import build_session
from memabra._catalog import Skill, skill_items, tool_items
from memabra._context import assemble, memory_line, skill_section
from memabra._errors import ConfigError
from memabra._middleware import create_memabra_middleware
from memabra._records import Budget, Candidate, CandidateKind, Selection
from memabra._session import RoutingSession
from memabra._settings import SessionSettings
from memabra._text import approx_tokens
from memabra._token_count import TokenCounts
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog

PIRATE = Skill("pirate", "talk like a pirate", "Say arr at every turn.\nNever use the word 'yes'.")
PASSPORT = "my passport number is X1234567"
CITY = "I live in Lyon"


def _session(log: EpisodeLog, tools: Sequence[Any], **settings: Any) -> RoutingSession:
    return RoutingSession.with_tools(
        tools=tools, skills=[PIRATE], router=HybridRouter(similarity=Similarity(encoder=None)), log=log, **settings
    )


def _offered_tokens(log: EpisodeLog, episode_id: str) -> dict[str, int]:
    (selection,) = log.get_episode(episode_id).selections
    return {sc.candidate.id: sc.candidate.tokens for sc in selection.offered}


def _turn(session: RoutingSession, query: str, user: str = "ann") -> tuple[Selection | None, str]:
    t = session.begin(user_id=user, query=query, thread_id="t1")
    return t.selection, session.finish(t.id, "ok")


class Recording:
    """A counter that counts characters and remembers every text it was asked about."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __call__(self, text: str) -> int:
        self.calls[text] += 1
        return len(text)


def test_the_budget_is_enforced_in_the_counters_tokens(log: EpisodeLog, tools: list[Any]) -> None:
    """A memory the estimate calls small (6 words) and the tokenizer calls large is not injected
    over the budget; the estimate alone would inject it."""
    budget = Budget(max_tokens=100, slots={CandidateKind.MEMORY: 3})

    def counter(text: str) -> int:
        return 400 if "X1234567" in text else len(text.split())

    with _session(log, tools, budget=budget, learn=False) as plain:
        plain.memory.remember("ann", PASSPORT)
        plain.memory.remember("ann", CITY)
        estimated, _ = _turn(plain, "what is my passport number and where do I live")
    assert estimated is not None and {c.text for c in estimated.chosen} == {PASSPORT, CITY}

    with _session(log, tools, budget=budget, learn=False, token_counter=counter) as counted:
        selection, episode_id = _turn(counted, "what is my passport number and where do I live")
    assert selection is not None
    assert [c.text for c in selection.chosen] == [CITY]
    assert selection.tokens_injected == len(memory_line(CITY).split()) <= 100
    passport_id = next(sc.candidate.id for sc in selection.offered if sc.candidate.text == PASSPORT)
    assert _offered_tokens(log, episode_id)[passport_id] == 400


def test_logged_candidates_carry_the_tokens_of_their_prompt_text(log: EpisodeLog, tools: list[Any]) -> None:
    """A memory costs its bullet line, a skill its prompt section, a tool its bound function spec;
    the log, the selection's ``tokens_injected`` and the reward's context cost read the same numbers."""
    budget = Budget(max_tokens=None, slots={CandidateKind.MEMORY: 2, CandidateKind.SKILL: 1, CandidateKind.TOOL: 3})
    with _session(log, tools, budget=budget, learn=False, token_counter=len) as session:
        memory = session.memory.remember("ann", CITY)
        selection, episode_id = _turn(session, "weather where I live, pirate style")
    specs = {i.id: i.body for i in tool_items(tools)}
    expected = {memory.id: len(memory_line(CITY)), "skill:pirate": len(skill_section(PIRATE))}
    expected.update({tid: len(spec or "") for tid, spec in specs.items()})
    logged = _offered_tokens(log, episode_id)
    assert logged == expected
    assert selection is not None
    stored = log.get_episode(episode_id).selections[0]
    assert stored.tokens_injected == selection.tokens_injected == sum(expected[c.id] for c in selection.chosen)
    # the registry rows of the session's skills and tools carry the counts it offers them with
    registered = {i.id: i.tokens for i in log.items("ann") if i.kind is not CandidateKind.MEMORY}
    assert registered == {k: v for k, v in expected.items() if k != memory.id}


def test_skill_section_is_the_text_assemble_injects() -> None:
    candidate = Candidate("skill:pirate", CandidateKind.SKILL, "pirate: talk like a pirate", 1)
    prompt, _ = assemble(_only(candidate), {"skill:pirate": PIRATE}, frozenset())
    assert prompt == skill_section(PIRATE)


def _only(candidate: Candidate) -> Any:
    class OneChosen:  # assemble reads only what was chosen
        chosen = (candidate,)

    return OneChosen()


def test_skills_and_tools_are_counted_once_and_memories_through_a_cache(log: EpisodeLog, tools: list[Any]) -> None:
    counter = Recording()
    with _session(log, tools, learn=False, token_counter=counter) as session:
        session.memory.remember("ann", CITY)
        for query in ("weather in Lyon", "forecast for Lyon", "convert 3 miles", "weather again"):
            _turn(session, query)
        session.memory.remember("bob", PASSPORT)
        _turn(session, "my passport", user="bob")
    prompt_texts = [skill_section(PIRATE), *(i.body or "" for i in tool_items(tools))]
    assert all(counter.calls[text] == 1 for text in prompt_texts)
    assert counter.calls[memory_line(CITY)] == 1  # four turns recalled it: counted once
    assert counter.calls[memory_line(PASSPORT)] == 1


def test_the_cache_is_bounded_and_keeps_what_is_recent() -> None:
    counter = Recording()
    counts = TokenCounts(counter, cache_size=2)
    for text in ("a", "b", "a", "c", "a", "b"):
        counts.count(text, "memory:x")
    assert counter.calls == Counter({"a": 1, "b": 2, "c": 1})


def _raises(text: str) -> int:
    raise RuntimeError("tokenizer.json is not loaded")


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (_raises, "raised on the prompt text of candidate 'skill:pirate': RuntimeError: tokenizer.json"),
        (lambda text: 3.5, "returned 3.5 for the prompt text of candidate 'skill:pirate'"),
        (lambda text: -1, "returned -1 for the prompt text of candidate 'skill:pirate'"),
        (lambda text: True, "returned True"),
        (lambda text: "12", "returned '12'"),
        (lambda text: None, "returned None"),
    ],
)
def test_a_bad_counter_is_refused_naming_the_candidate(
    log: EpisodeLog, tools: list[Any], bad: Callable[[str], Any], named: str
) -> None:
    with pytest.raises(ConfigError, match="non-negative integer|raised") as caught:
        _session(log, tools, learn=False, token_counter=bad)
    assert named in str(caught.value)
    assert log.items("ann") == []  # refused before the skills and tools were registered


def test_a_counter_failing_on_a_memory_fails_the_turn_before_anything_is_logged(
    log: EpisodeLog, tools: list[Any]
) -> None:
    broken = {"now": False}

    def counter(text: str) -> int:
        if broken["now"] and text.startswith("- "):
            raise ValueError("cannot encode")
        return len(text)

    with _session(log, tools, learn=False, token_counter=counter) as session:
        memory = session.memory.remember("ann", CITY)
        _, first = _turn(session, "weather where I live")
        feedback_before = log.feedback_for(first)
        broken["now"] = True
        session._counts = TokenCounts(counter)  # a fresh cache: the memory's count is asked again
        with pytest.raises(ConfigError, match=f"candidate {memory.id!r}: ValueError: cannot encode"):
            # a correction of the previous turn: its feedback must not be posted for a turn that fails
            session.begin(user_id="ann", query="no, that's wrong, I live in Lyon", thread_id="t1")
        assert log.feedback_for(first) == feedback_before
        assert [e.id for e in log.list_episodes().items] == [first]
        broken["now"] = False  # the same message, counted, is taken as the correction it is
        t = session.begin(user_id="ann", query="no, that's wrong, I live in Lyon", thread_id="t1")
        assert len(log.feedback_for(first)) > len(feedback_before)
        session.abandon(t.id)


def test_integer_types_of_numpy_count(log: EpisodeLog, tools: list[Any]) -> None:
    with _session(log, tools, learn=False, token_counter=lambda text: np.int64(7)) as session:
        session.memory.remember("ann", CITY)
        _, episode_id = _turn(session, "where do I live")
    assert set(_offered_tokens(log, episode_id).values()) == {7}
    assert all(type(n) is int for n in _offered_tokens(log, episode_id).values())


def test_a_counter_that_is_not_callable_is_refused() -> None:
    with pytest.raises(ConfigError, match="token_counter must be a function from text"):
        SessionSettings(token_counter="cl100k_base")  # type: ignore[arg-type]


def test_without_a_counter_every_count_is_the_estimate_as_before(log: EpisodeLog, tools: list[Any]) -> None:
    """``None``: memories cost the registry's estimate, skills and tools the catalogue's (what every
    published figure and existing log was made with)."""
    budget = Budget(max_tokens=None, slots={CandidateKind.MEMORY: 2, CandidateKind.SKILL: 1, CandidateKind.TOOL: 3})
    with _session(log, tools, budget=budget, learn=False) as session:
        memory = session.memory.remember("ann", CITY)
        assert memory.tokens == approx_tokens(CITY)
        for query in ("weather where I live, pirate style", "my favourite colour is teal", "convert 3 km"):
            memories = {i.id: i.tokens for i in log.items("ann", CandidateKind.MEMORY)}  # as written
            _, episode_id = _turn(session, query)
            expected = {i.id: i.tokens for i in skill_items([PIRATE]) + tool_items(tools)} | memories
            assert _offered_tokens(log, episode_id) == expected


@pytest.fixture
def counted_agent(log: EpisodeLog, tools: list[Any]) -> Iterator[Any]:
    agent = create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("ok")]),
        tools=tools[:1],
        skills=[PIRATE],
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        learn=False,
        token_counter=len,
    )
    yield agent
    agent.close()


def test_the_agent_and_the_middleware_take_the_counter(log: EpisodeLog, tools: list[Any], counted_agent: Any) -> None:
    out = counted_agent.invoke(
        {"messages": [HumanMessage("weather in Paris")]},
        {"configurable": {"thread_id": "t1"}},
        context={"user_id": "ann"},
    )
    logged = _offered_tokens(log, str(out["memabra_episode_id"]))
    assert logged["skill:pirate"] == len(skill_section(PIRATE))
    assert logged["tool:get_weather"] == len(tool_items(tools[:1])[0].body or "")

    middleware = create_memabra_middleware(tools=tools[:1], db=log, learn=False, token_counter=len)
    try:
        assert middleware.session.settings.token_counter is len
    finally:
        middleware.session.close()
    built = build_session(db=log, learn=False, settings=SessionSettings(token_counter=len))
    try:
        assert built.settings.token_counter is len
    finally:
        built.close()
