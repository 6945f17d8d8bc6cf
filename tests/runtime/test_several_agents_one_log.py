"""Two agents (a support bot and a sales bot, different tools, the same users) logging to one
database, each routing with a policy of its own: a LinearRouter subclass with its own ``name``.
What the policy name separates (serving, learner lease and checkpoint, snapshots, promotion,
status) and what it does not (each learner learns every final reward of the log); the command line
naming each policy by its class, as an operator would (docs/production.md, "Several agents on one
log")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from typer.testing import CliRunner

from factories import readable_final_rewards
from fakes import ScriptedChatModel
from memabra import Budget, MemabraAgent, create_memabra_agent
from memabra._cli._app import app
from memabra.router import LinearRouter, Router, Similarity
from memabra.storage import EpisodeLog, LearnerStore


class SupportRouter(LinearRouter):
    """The support bot's router: LinearRouter under a policy of its own."""

    name = "support"


class SalesRouter(LinearRouter):
    """The sales bot's router."""

    name = "sales"


# how a command line (a subprocess, or the CLI in this process) names these classes
HERE = Path(__file__).resolve().parent
SUPPORT = f"runtime.{Path(__file__).stem}:SupportRouter"
SALES = f"runtime.{Path(__file__).stem}:SalesRouter"
MEMABRA = Path(sys.executable).with_name("memabra")
TURNS = 3  # per bot

runner = CliRunner(env={"COLUMNS": "200"})


@tool
def reset_password(account: str) -> str:
    """Reset the password of a customer's account."""
    return f"a reset link was sent for {account}"


@tool
def open_ticket(summary: str) -> str:
    """Open a support ticket."""
    return "ticket T-1"


@tool
def quote_price(product: str) -> str:
    """Quote the price of a product plan."""
    return f"{product}: 10 EUR a month"


@tool
def book_demo(day: str) -> str:
    """Book a product demo with sales."""
    return f"demo booked on {day}"


def _agent(log: EpisodeLog, router: Router, tools: list[BaseTool]) -> MemabraAgent:
    return create_memabra_agent(
        ScriptedChatModel(replies=[AIMessage("Noted.")] * 20),
        tools=tools,
        db=log,
        router=router,
        budget=Budget(max_tokens=400),
        snapshot_every=2,
    )


@pytest.fixture
def bots(log: EpisodeLog, lexical: Similarity) -> Iterator[tuple[MemabraAgent, MemabraAgent]]:
    support = _agent(log, SupportRouter(similarity=lexical), [reset_password, open_ticket])
    sales = _agent(log, SalesRouter(similarity=lexical), [quote_price, book_demo])
    yield support, sales
    support.close()
    sales.close()


def _talk(support: MemabraAgent, sales: MemabraAgent, first: int = 0) -> dict[str, list[str]]:
    """``TURNS`` turns of ann with each bot (threads numbered from ``first``), each with final
    feedback; the episode ids by bot."""
    episodes: dict[str, list[str]] = {"support": [], "sales": []}
    for i in range(first, first + TURNS):
        for bot, agent, query in (
            ("support", support, "I forgot my password"),
            ("sales", sales, "How much is the pro plan?"),
        ):
            out = agent.invoke(
                {"messages": [HumanMessage(query)]},
                {"configurable": {"thread_id": f"{bot}-{i}"}},
                context={"user_id": "ann"},
            )
            agent.feedback(out["memabra_episode_id"], correct=True, final=True)
            episodes[bot].append(out["memabra_episode_id"])
    return episodes


def _learn_everything(log: EpisodeLog, *agents: MemabraAgent) -> None:
    # on PostgreSQL a reward is readable once every older transaction on the server ended
    readable_final_rewards(LearnerStore(log.engine), at_least=2 * TURNS)
    for agent in agents:
        agent.session.learn_pending()


def test_each_agent_serves_its_own_policy_and_its_learner_learns_every_final_reward(
    log: EpisodeLog, bots: tuple[MemabraAgent, MemabraAgent]
) -> None:
    support, sales = bots
    episodes = _talk(support, sales)
    _learn_everything(log, support, sales)
    for bot, ids in episodes.items():
        for episode_id in ids:
            (selection,) = log.get_episode(episode_id).selections
            assert selection.policy == bot and selection.policy_version.startswith(f"{bot}-")
            offered = {c.candidate.id for c in selection.offered}
            other = {"support": {"quote_price", "book_demo"}, "sales": {"reset_password", "open_ticket"}}[bot]
            assert not offered & other  # each bot routes over its own tools (and ann's memories)
    store = LearnerStore(log.engine)
    support_state, sales_state = store.checkpoint("support"), store.checkpoint("sales")
    assert support_state is not None and sales_state is not None
    assert store.checkpoint("linear") is None and log.latest_snapshot("linear") is None
    # separate lineages...
    assert {s.policy for s in log.list_snapshots()} == {"support", "sales"}
    assert support_state.snapshot_version.startswith("support-")  # type: ignore[union-attr]
    assert sales_state.snapshot_version.startswith("sales-")  # type: ignore[union-attr]
    # ...learned from the same rewards: a learner reads every final reward of the log, whichever
    # policy logged its decision (off-policy, with the logged propensities)
    assert support_state.learned == sales_state.learned == 2 * TURNS
    assert support_state.position == sales_state.position
    # each agent serves its own policy's active snapshot, never the other's
    assert support.router.policy_version == store.active_version("support")
    assert sales.router.policy_version == store.active_version("sales")


def test_the_command_line_shows_learns_and_rolls_back_each_policy_apart(
    log: EpisodeLog, migrated_url: str, bots: tuple[MemabraAgent, MemabraAgent], tmp_path: Path
) -> None:
    support, sales = bots
    # the agents' own learners learn the first turns (so each policy has snapshots to roll back
    # to, whichever rewards PostgreSQL lets them read before they close), the command line the rest
    _talk(support, sales)
    _learn_everything(log, support, sales)
    _talk(support, sales, first=TURNS)
    support.close()  # commits what it learned and frees the lease for the command-line learner
    sales.close()
    store = LearnerStore(log.engine)
    readable_final_rewards(store, at_least=4 * TURNS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    for path, policy in ((SUPPORT, "support"), (SALES, "sales")):
        learned = _memabra(env, "learner", "--once", "--db", migrated_url, "--policy", path)
        assert learned.returncode == 0, learned.stderr
        assert f"({4 * TURNS} in this lineage" in learned.stdout, learned.stdout
        state = store.checkpoint(policy)
        assert state is not None and state.learned == 4 * TURNS
    assert store.checkpoint("linear") is None

    status_json = tmp_path / "status.json"
    assert runner.invoke(app, ["status", "--db", migrated_url, "--json", str(status_json)]).exit_code == 0
    policies = {p["policy"]: p for p in json.loads(status_json.read_text())["status"]["policies"]}
    assert set(policies) == {"support", "sales"}
    assert all(p["backlog"] == 0 and p["checkpoint"]["learned"] == 4 * TURNS for p in policies.values())

    listed_json = tmp_path / "policies.json"
    assert runner.invoke(app, ["policies", "list", "--db", migrated_url, "--json", str(listed_json)]).exit_code == 0
    active = {r["policy"]: r["version"] for r in json.loads(listed_json.read_text()) if r["status"] == "active"}
    assert active == {"support": store.active_version("support"), "sales": store.active_version("sales")}

    # a rollback named by the router's class, as `memabra learner --policy` names it
    back = runner.invoke(app, ["policies", "rollback", "--db", migrated_url, "--policy", SUPPORT])
    assert back.exit_code == 0, back.output
    assert "rolled back policy support: " in back.output and f"{active['support']} retired" in back.output
    assert store.active_version("support") != active["support"]
    assert store.active_version("sales") == active["sales"]  # the sales bot is left alone
    with _agent(log, SalesRouter(), [quote_price, book_demo]) as again:
        assert again.router.policy_version == active["sales"]
    with _agent(log, SupportRouter(), [reset_password, open_ticket]) as again:
        assert again.router.policy_version == store.active_version("support")

    # `ope log --policy active` would pick whichever policy's snapshot was saved last: refused
    # (offline evaluation runs as a command of its own: it loads scikit-learn)
    both = _memabra(env, "ope", "log", "--db", migrated_url, "--policy", "active", "--no-store")
    assert both.returncode == 1, both.stderr
    assert "active snapshot of each of 2 policies (sales, support)" in " ".join(both.stderr.split())
    # each bot's active snapshot, restored from its class
    ope_json = tmp_path / "ope.json"
    policies_given = ("--policy", f"active:{SUPPORT}", "--policy", f"active:{SALES}")
    each = _memabra(env, "ope", "log", "--db", migrated_url, *policies_given, "--no-store", "--json", str(ope_json))
    assert each.returncode == 0, each.stderr
    evaluated = json.loads(ope_json.read_text())["policies"]
    assert evaluated[f"active:{SUPPORT}"]["snapshot_version"] == store.active_version("support")
    assert evaluated[f"active:{SALES}"]["snapshot_version"] == active["sales"]
    # a snapshot no longer active (the one rolled back), restored from its class; without the class,
    # the error says how to name it
    retired = f"snapshot:{active['support']}"
    named = _memabra(env, "ope", "log", "--db", migrated_url, "--policy", f"{retired}:{SUPPORT}", "--no-store")
    assert named.returncode == 0, named.stderr
    bare = _memabra(env, "ope", "log", "--db", migrated_url, "--policy", retired, "--no-store")
    assert bare.returncode == 1 and f"{retired}:module:Class" in " ".join(bare.stderr.split()), bare.stderr


def _memabra(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MEMABRA), *args], capture_output=True, text=True, env=env, timeout=300)
