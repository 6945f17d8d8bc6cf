"""find_tools: the model fetches a tool the router left out; the turn records it as needed and missed."""

from __future__ import annotations

import time

from langchain_core.messages import HumanMessage

from memabra import Budget, CandidateKind, create_memabra_agent
from memabra._demo_world import ASSOCIATIONS, make_tools
from memabra._standin import ExtractiveChatModel, associations_from
from memabra._tool_search import FIND_TOOLS
from memabra.router import HybridRouter, Similarity
from memabra.storage import EpisodeLog, LearnerStore
from tests.factories import readable_final_rewards

ONE_TOOL = Budget(max_tokens=300, slots={CandidateKind.MEMORY: 2, CandidateKind.TOOL: 1})


def _agent(log: EpisodeLog, tool_search: bool):  # type: ignore[no-untyped-def]
    model = ExtractiveChatModel(associations=associations_from(ASSOCIATIONS))
    return create_memabra_agent(
        model,
        tools=make_tools(),
        db=log,
        router=HybridRouter(similarity=Similarity(encoder=None)),
        budget=ONE_TOOL,
        tool_search=tool_search,
        learn=False,
    )


def _ask(agent, text: str):  # type: ignore[no-untyped-def]
    return agent.invoke(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": "t"}}, context={"user_id": "ann"}
    )


def test_the_model_fetches_a_tool_the_router_left_out_and_the_miss_is_recorded(log: EpisodeLog) -> None:
    agent = _agent(log, tool_search=True)
    out = _ask(agent, "Tell me when the pasta is done")
    ep = log.get_episode(out["memabra_episode_id"])
    assert "tool:set_timer" not in ep.selections[0].chosen_ids  # the router left it out
    assert [s.name for s in ep.steps if s.kind.value == "tool"] == [FIND_TOOLS, "set_timer"]
    assert "set_timer done" in out["messages"][-1].content
    relevant = [f.payload["relevant_ids"] for f in ep.feedback if f.source == "memabra.find_tools"]
    assert relevant == [["tool:set_timer"]]
    assert ep.reward is not None and ep.reward.components.ht < 1.0  # an Ht miss
    # what the learner reads from the log: the tool as a needed candidate no selection chose
    agent.session.rewards.finalize(ep.id)
    [final] = readable_final_rewards(LearnerStore(log.engine))
    assert final.item.missing == ("tool:set_timer",)


def test_only_a_fetched_tool_that_is_then_called_counts_as_missed() -> None:
    from memabra._catalog import tool_items
    from memabra._tool_search import ToolSearch

    search = ToolSearch(tool_items(make_tools()), encoder=None)
    bound: list[str] = []
    reply = search.search("turn-1", "countdown timer minutes", ("get_weather",), bound.extend)
    assert "set_timer" in bound and "set_timer" in reply and "get_weather" not in bound
    feedback: list = []  # type: ignore[type-arg]
    search.used("turn-1", "ep-1", "get_weather", feedback)  # routed, not fetched: no miss
    assert feedback == []
    search.used("turn-1", "ep-1", "set_timer", feedback)
    search.used("turn-1", "ep-1", "set_timer", feedback)  # called twice, recorded once
    assert [f.payload for f in feedback] == [{"relevant_ids": ["tool:set_timer"]}]
    assert search.search("turn-1", "  ", (), bound.extend).startswith("Describe")


def test_without_tool_search_the_model_cannot_ask(log: EpisodeLog) -> None:
    agent = _agent(log, tool_search=False)
    out = _ask(agent, "Tell me when the pasta is done")
    ep = log.get_episode(out["memabra_episode_id"])
    assert FIND_TOOLS not in [s.name for s in ep.steps]
    assert "set_timer done" not in out["messages"][-1].content


def test_the_fetched_tool_reaches_every_learner_as_needed_and_missed(log: EpisodeLog) -> None:
    """The miss travels through the log, so a learner in any process (and a replay) is told of it."""
    from memabra.storage import LearnerStore

    agent = _agent(log, tool_search=True)
    out = _ask(agent, "Tell me when the pasta is done")
    agent.feedback(out["memabra_episode_id"], correct=True, final=True)
    # On PostgreSQL read_final waits behind the oldest transaction still open anywhere on the server
    # (a late-commit guard), so another session's open transaction can hold the row back for a while.
    deadline = time.monotonic() + 60.0
    while True:
        found = [f for f in LearnerStore(log.engine).read_final() if f.item.episode_id == out["memabra_episode_id"]]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    [final] = found
    assert final.item.missing == ("tool:set_timer",)
    [claimed] = [i for i in log.claim_learning() if i.episode_id == out["memabra_episode_id"]]
    assert claimed.missing == ("tool:set_timer",)


_TICKETS = "This tool belongs to the ticketing system, which allows users to create, view, and manage support tickets."


def _ticket_tools():  # type: ignore[no-untyped-def]
    from langchain_core.tools import StructuredTool

    def tool(name: str, description: str):  # type: ignore[no-untyped-def]
        def run(ticket_id: str = "") -> str:
            return name

        return StructuredTool.from_function(run, name=name, description=f"{_TICKETS} {description}")

    return [
        tool("close_ticket", "Close a ticket. Parameters: ticket_id (ID of the ticket to be closed.)"),
        tool("get_ticket", "Get a specific ticket by its ID. Parameters: ticket_id (ID of the ticket to retrieve.)"),
        tool("resolve_ticket", "Resolve a ticket with a resolution. Parameters: ticket_id (ID of the ticket.)"),
        tool("create_ticket", "Create a ticket in the system and queue it. Parameters: title, description."),
        tool("add", "Add two numbers. Parameters: a, b."),
        tool("add_contact", "Add a contact to the workspace. Parameters: user_name."),
    ]


def test_a_tool_asked_for_by_its_exact_name_comes_first() -> None:
    """A model refused a tool it knows asks find_tools for it by name; on the BFCL registry words
    alone put create_ticket fourth, behind three tools whose names share its words."""
    from memabra._catalog import tool_items
    from memabra._tool_search import ToolSearch

    search = ToolSearch(tool_items(_ticket_tools()), encoder=None)
    for n, query in enumerate(["create_ticket", "`create_ticket`", "create_ticket(title='x')", "CREATE_TICKET"]):
        bound: list[str] = []
        search.search(f"turn-{n}", query, (), bound.extend)
        assert bound[0] == "create_ticket", query
    bound = []
    search.search("turn-two", "I need create_ticket and then close_ticket", (), bound.extend)
    assert bound[:2] == ["create_ticket", "close_ticket"]


def test_a_plain_word_in_a_request_is_not_taken_for_a_tool_name() -> None:
    from memabra._catalog import tool_items
    from memabra._tool_search import ToolSearch

    search = ToolSearch(tool_items(_ticket_tools()), encoder=None)
    bound: list[str] = []
    search.search("turn-1", "add a contact for Ann", (), bound.extend)
    assert bound[0] == "add_contact"  # not the tool called add, though "add" is a word of the request
    bound = []
    search.search("turn-2", "add", (), bound.extend)  # standing alone, the word is the name asked for
    assert bound[0] == "add"


def test_turns_that_never_end_here_are_not_kept_for_ever(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A served agent's turns cancelled by their client (or paused, then resumed in another worker)
    # never reach the finish node that forgets what find_tools fetched for them: one entry per
    # such turn was kept for the life of the process.
    import memabra._tool_search as tool_search
    from memabra._catalog import tool_items

    monkeypatch.setattr(tool_search, "MAX_TURNS_IN_FLIGHT", 5, raising=False)
    search = tool_search.ToolSearch(tool_items(make_tools()), encoder=None)
    for n in range(40):
        search.search(f"turn-{n}", "weather forecast", [], lambda names: None)
    assert len(search._fetched) <= 5
    assert search.fetched("turn-39")  # the newest turns keep theirs
