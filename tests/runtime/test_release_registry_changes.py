"""Weekly releases of an agent over one log: a release adds, removes, renames or edits tools and
skills, and for a few minutes of a rolling deploy the old release's processes run beside the new
one's. What each past decision offered is what the log says it offered then; a process offers only
its own release's tools and skills; offline evaluation, training and ``memabra route`` read a log
whose older decisions name tools no release has any more; and a release that names two tools or
two skills alike is refused before anything is registered."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from typer.testing import CliRunner

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, ConfigError, Skill
from memabra._agent import build_session, create_memabra_agent
from memabra._catalog import skill_items, tool_items
from memabra._cli._app import app
from memabra._session import RoutingSession
from memabra.router import HybridRouter, LinearRouter, Similarity
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})
EVERYTHING = Budget(max_tokens=8000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 3, CandidateKind.TOOL: 5})
ASK = "Where is my order 42, and can I get a refund?"


# ------------------------------------------------------------------ two releases of one agent


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status."""
    return f"order {order_id} shipped"


@tool
def refund_order(order_id: str) -> str:
    """Refund a customer's order."""
    return f"refunded {order_id}"


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@tool("lookup_order")
def lookup_order_v2(order_id: str, include_items: bool = False) -> str:
    """Look up an order's status and, when asked, its line items."""
    return f"order {order_id} shipped"


@tool
def weather_now(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@tool
def cancel_order(order_id: str) -> str:
    """Cancel a customer's order before it ships."""
    return f"cancelled {order_id}"


TONE_V1 = Skill("tone", "How to answer an order question.", "Be brief.")
TONE_V2 = Skill("tone", "How to answer an order or refund question.", "Be brief and name the order number.")
# release 1: three tools and a skill; release 2 edits lookup_order (description and a new argument)
# and the skill (description and body), removes refund_order, renames get_weather, adds cancel_order
RELEASE_1: dict[str, Any] = {"tools": [lookup_order, refund_order, get_weather], "skills": [TONE_V1]}
RELEASE_2: dict[str, Any] = {"tools": [lookup_order_v2, weather_now, cancel_order], "skills": [TONE_V2]}


def _session(log: EpisodeLog, lexical: Similarity, release: dict[str, Any], **kw: Any) -> RoutingSession:
    router = kw.pop("router", None) or HybridRouter(similarity=lexical)
    return build_session(db=log, router=router, budget=EVERYTHING, learn=False, **release, **kw)


def _turn(session: RoutingSession, user: str = "ann", query: str = ASK) -> str:
    t = session.begin(user_id=user, query=query)
    return session.finish(t.id, "Order 42 shipped.")


def _offered(log: EpisodeLog, episode_id: str) -> dict[str, str]:
    """Each candidate the logged decision offered, with the text it was offered with."""
    (selection,) = log.get_episode(episode_id).selections
    return {sc.candidate.id: sc.candidate.text for sc in selection.offered}


# ------------------------------------------------------------------ (1) what the log says


def test_a_past_decision_keeps_the_descriptions_it_offered_after_a_release_edits_them(
    log: EpisodeLog, lexical: Similarity
) -> None:
    with _session(log, lexical, RELEASE_1) as old:
        before = _turn(old)
    with _session(log, lexical, RELEASE_2) as new:
        after = _turn(new)
    then, now = _offered(log, before), _offered(log, after)
    assert set(then) == {"tool:lookup_order", "tool:refund_order", "tool:get_weather", "skill:tone"}
    assert set(now) == {"tool:lookup_order", "tool:weather_now", "tool:cancel_order", "skill:tone"}
    assert "Look up an order's status. Parameters: order_id" in then["tool:lookup_order"]
    assert "include_items" not in then["tool:lookup_order"] and "include_items" in now["tool:lookup_order"]
    assert then["skill:tone"] == "tone: How to answer an order question."
    assert now["skill:tone"] == "tone: How to answer an order or refund question."
    # the registry holds today's text; the log, each decision's own
    registered = {i.id: i for i in log.items("ann")}
    assert registered["skill:tone"].body == TONE_V2.body
    assert registered["tool:refund_order"].text == then["tool:refund_order"]  # kept, not deleted


def test_the_episode_document_of_an_old_decision_shows_what_it_offered_then(
    log: EpisodeLog, lexical: Similarity
) -> None:
    from memabra._episode_document import episode_document

    with _session(log, lexical, RELEASE_1) as old:
        before = _turn(old)
    with _session(log, lexical, RELEASE_2) as new:
        _turn(new)
    document = json.dumps(episode_document(log.get_episode(before)))
    assert "Refund a customer's order." in document
    assert "How to answer an order question." in document
    assert "include_items" not in document


# ------------------------------------------------------------------ (2) the router and removed tools


def test_a_release_offers_only_its_own_tools_whatever_the_registry_still_holds(
    log: EpisodeLog, lexical: Similarity
) -> None:
    with _session(log, lexical, RELEASE_1) as old:
        for _ in range(3):
            _turn(old)
    with _session(log, lexical, RELEASE_2) as new:
        episodes = [_turn(new) for _ in range(5)]
    for episode_id in episodes:
        (selection,) = log.get_episode(episode_id).selections
        offered = {sc.candidate.id for sc in selection.offered}
        assert offered == {"tool:lookup_order", "tool:weather_now", "tool:cancel_order", "skill:tone"}
        assert {c.id for c in selection.chosen} <= offered


def test_an_edited_tool_keeps_its_history_and_a_renamed_one_starts_afresh(log: EpisodeLog, lexical: Similarity) -> None:
    """The router knows a tool by its id (``tool:<name>``): an edited description or schema keeps
    the counts (and the learned weights) of its id; a renamed tool is a new candidate."""
    with _session(log, lexical, RELEASE_1) as old:
        before = [_turn(old) for _ in range(4)]
    chosen_before = {c.id for e in before for c in log.get_episode(e).selections[0].chosen}
    assert {"tool:lookup_order", "tool:get_weather"} <= chosen_before
    with _session(log, lexical, RELEASE_2) as new:
        (selection,) = log.get_episode(_turn(new)).selections
    features = {sc.candidate.id: sc.features for sc in selection.offered}
    assert features["tool:lookup_order"]["chosen_log"] > 0  # edited: its history carried over
    assert features["tool:weather_now"]["chosen_log"] == 0  # renamed: none of get_weather's
    assert features["tool:weather_now"]["fresh"] == 1


# ------------------------------------------------------------------ (5) names given twice


def test_two_skills_with_one_name_are_refused(log: EpisodeLog, lexical: Similarity) -> None:
    with pytest.raises(ConfigError, match=r"skill names must be unique.*'tone'"):
        _session(log, lexical, {"skills": [TONE_V1, TONE_V2]})
    assert log.items("ann") == []  # nothing registered


def test_two_tools_with_one_name_are_refused(log: EpisodeLog, lexical: Similarity) -> None:
    with pytest.raises(ConfigError, match=r"tool names must be unique.*'lookup_order'"):
        _session(log, lexical, {"tools": [lookup_order, lookup_order_v2]})
    assert log.items("ann") == []


def test_skill_items_refuses_one_name_twice() -> None:
    with pytest.raises(ConfigError, match="'tone'"):
        skill_items([TONE_V1, TONE_V2])


def test_a_skill_and_a_tool_with_one_name_are_two_candidates(log: EpisodeLog, lexical: Similarity) -> None:
    @tool("tone")
    def tone_tool(text: str) -> str:
        """Rewrite a reply in the house tone."""
        return text

    with _session(log, lexical, {"tools": [tone_tool], "skills": [TONE_V1]}) as session:
        offered = _offered(log, _turn(session))
    assert set(offered) == {"tool:tone", "skill:tone"}


def test_a_session_given_tools_directly_refuses_two_with_one_name(log: EpisodeLog, lexical: Similarity) -> None:
    with pytest.raises(ConfigError, match=r"tool names must be unique.*'lookup_order'"):
        RoutingSession.with_tools(
            tools=[lookup_order, lookup_order_v2], router=HybridRouter(similarity=lexical), log=log
        )
    assert log.items("ann") == []


# ------------------------------------------------------------------ (4) a rolling deploy


def test_processes_of_a_new_release_starting_together_register_its_new_tools_once(migrated_url: str) -> None:
    """Pods of one release start at once and each registers the tools: a tool new to the log is
    inserted by one of them, and none fails its start on the others' insert."""
    pods = 6
    ready = threading.Barrier(pods)
    failures: list[BaseException] = []

    def start() -> None:
        with EpisodeLog(migrated_url) as log:
            items = tool_items([lookup_order_v2, weather_now, cancel_order]) + skill_items([TONE_V2])
            ready.wait()
            try:
                log.put_items(items)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

    threads = [threading.Thread(target=start) for _ in range(pods)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    with EpisodeLog(migrated_url) as log:
        assert {i.id for i in log.items("ann")} == {
            "tool:lookup_order",
            "tool:weather_now",
            "tool:cancel_order",
            "skill:tone",
        }


def _learning(log: EpisodeLog, lexical: Similarity, release: dict[str, Any]) -> RoutingSession:
    return build_session(db=log, router=LinearRouter(similarity=lexical), budget=EVERYTHING, learn=True, **release)


def _final_turn(session: RoutingSession, query: str = ASK) -> str:
    episode_id = _turn(session, query=query)
    session.rewards.finalize(episode_id)
    return episode_id


def test_old_and_new_release_serving_one_log_learn_it_and_credit_each_tool_by_its_own_id(
    log: EpisodeLog, lexical: Similarity
) -> None:
    """A rolling deploy: the old release still offers refund_order while the new one serves; one
    learner (whichever holds the lease) learns both releases' decisions; each decision's tools are
    counted for the tool it chose, under the id it chose it by."""
    old, new = _learning(log, lexical, RELEASE_1), _learning(log, lexical, RELEASE_2)
    try:
        mine: dict[str, list[str]] = {"old": [], "new": []}
        learned = 0
        for _ in range(6):
            mine["old"].append(_final_turn(old))
            mine["new"].append(_final_turn(new))
            learned += old.learn_pending() + new.learn_pending()  # neither raises on the other's tools
        for release, session in (("old", old), ("new", new)):
            own = {i.id for i in session._shared.items}
            for episode_id in mine[release]:
                (selection,) = log.get_episode(episode_id).selections
                assert {sc.candidate.id for sc in selection.offered} == own
        chosen: dict[str, int] = {}
        for episode_id in mine["old"] + mine["new"]:
            for c in log.get_episode(episode_id).selections[0].chosen:
                chosen[c.id] = chosen.get(c.id, 0) + 1
        counted = {i.id: i.times_chosen for i in log.items("ann") if i.times_chosen}
        assert counted == chosen
        # the lease holder learned both releases' final rewards (some as a turn finished), none left
        assert learned > 0 and old.learn_pending() + new.learn_pending() == 0
        # the new release's router, having learned refund_order's decisions, still offers only its own
        for _ in range(4):
            offered = _offered(log, _turn(new))
            assert "tool:refund_order" not in offered and "tool:get_weather" not in offered
    finally:
        old.close()
        new.close()


def test_a_removed_tool_deleted_from_the_registry_is_offered_by_no_release_until_registered_again(
    log: EpisodeLog, lexical: Similarity
) -> None:
    with _session(log, lexical, RELEASE_1) as old:
        assert "tool:refund_order" in _offered(log, _turn(old))
        assert log.delete_item(CandidateKind.TOOL, "", "tool:refund_order")  # the rollout is done
        # an old process still running leaves the deleted tool out, rather than failing
        assert "tool:refund_order" not in _offered(log, _turn(old))
    assert "tool:refund_order" not in {i.id for i in log.items("ann")}
    with _session(log, lexical, RELEASE_1) as rolled_back:  # a rollback registers it again
        assert "tool:refund_order" in _offered(log, _turn(rolled_back))


def test_the_new_release_agent_refuses_a_removed_tool_its_model_still_calls(
    log: EpisodeLog, lexical: Similarity
) -> None:
    """A model that calls refund_order from habit after the release removed it: the call is refused
    as one the agent lacks, nothing runs, and it is not logged as a tool the router missed."""
    ran: list[str] = []

    @tool("refund_order")
    def refund_v1(order_id: str) -> str:
        """Refund a customer's order."""
        ran.append(order_id)
        return "refunded"

    old_model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[{"name": "refund_order", "args": {"order_id": "42"}, "id": "c1"}]),
            AIMessage("Refunded."),
        ]
    )
    old = create_memabra_agent(
        old_model,
        tools=[lookup_order, refund_v1],
        skills=[TONE_V1],
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=EVERYTHING,
        learn=False,
    )
    new_model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[{"name": "refund_order", "args": {"order_id": "43"}, "id": "c2"}]),
            AIMessage("I cannot refund."),
        ]
    )
    new = create_memabra_agent(
        new_model,
        tools=[lookup_order_v2, cancel_order],
        skills=[TONE_V2],
        db=log,
        router=HybridRouter(similarity=lexical),
        budget=EVERYTHING,
        learn=False,
    )
    try:
        ask = {"messages": [HumanMessage("Refund my order 42 please")]}
        before = old.invoke(ask, {"configurable": {"thread_id": "a"}}, context={"user_id": "ann"})
        after = new.invoke(ask, {"configurable": {"thread_id": "b"}}, context={"user_id": "ann"})
    finally:
        old.close()
        new.close()
    assert ran == ["42"]  # the old release ran it; the new one did not
    assert "tool:refund_order" in _offered(log, before["memabra_episode_id"])
    assert "tool:refund_order" not in _offered(log, after["memabra_episode_id"])
    refused = [s for s in log.get_episode(after["memabra_episode_id"]).steps if s.name == "refund_order"]
    assert refused and all(s.status != "ok" for s in refused)
    feedback = log.feedback_for(after["memabra_episode_id"])
    assert not any("tool:refund_order" in (f.payload.get("relevant_ids") or ()) for f in feedback)


# ------------------------------------------------------------------ (3) offline, training, route


def _cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_offline_evaluation_training_and_route_read_a_log_naming_tools_no_release_has(
    migrated_url: str, lexical: Similarity, tmp_path: Any
) -> None:
    with EpisodeLog(migrated_url) as log:
        with _learning(log, lexical, RELEASE_1) as old:
            old.memory.remember("ann", "My order number is 42")
            for _ in range(12):
                _final_turn(old)
        with _learning(log, lexical, RELEASE_2) as new:
            for _ in range(12):
                _final_turn(new)
            new.learn_pending()
            new.save_snapshot()
    out = tmp_path / "ope.json"
    _cli(
        "ope", "log", "--db", migrated_url, "--policy", "active", "--policy", "hybrid", "--no-store", "--json", str(out)
    )
    assert json.loads(out.read_text())
    trained = tmp_path / "train.json"
    _cli("train", "--from-log", "--db", migrated_url, "--force", "--json", str(trained))
    assert json.loads(trained.read_text())["saved_version"]
    routed = json.loads(_cli("route", ASK, "--db", migrated_url, "--user", "ann", "--seed", "1", "--json", "-").stdout)
    offered = {o["id"] for o in routed["offered"]}
    # route reads the registry, which keeps every tool some release registered and nobody deleted
    assert {"tool:refund_order", "tool:get_weather", "tool:weather_now", "tool:cancel_order"} <= offered
    with EpisodeLog(migrated_url) as log:
        log.delete_item(CandidateKind.TOOL, "", "tool:refund_order")
        log.delete_item(CandidateKind.TOOL, "", "tool:get_weather")
    routed = json.loads(_cli("route", ASK, "--db", migrated_url, "--user", "ann", "--seed", "1", "--json", "-").stdout)
    assert {o["id"] for o in routed["offered"] if o["kind"] == "tool"} == {
        "tool:lookup_order",
        "tool:weather_now",
        "tool:cancel_order",
    }
