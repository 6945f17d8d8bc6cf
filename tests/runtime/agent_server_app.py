"""The graphs ``tests/runtime/test_agent_server.py`` serves with ``langgraph dev``: the agent's
``server_graph`` (what docs/production.md tells a deployment to name in ``langgraph.json``), its
plain compiled graph (what ran there before, for comparison) and a ``create_agent`` graph with
``MemabraMiddleware`` and ``HumanInTheLoopMiddleware``. The log is ``$AGENT_SERVER_TEST_DB``."""

from __future__ import annotations

import os
import time
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import interrupt

from fakes import ScriptedChatModel
from memabra import Budget, CandidateKind, MemabraAgent, MemabraMiddleware, create_memabra_agent
from memabra._agent import build_session
from memabra.router import HybridRouter, Similarity

DB = os.environ["AGENT_SERVER_TEST_DB"]
SLOW_TOOL_S = 4.0  # long enough for the client to cancel the run, or send another, while it runs
ALL_TOOLS = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})


@tool
def send_email(to: str) -> str:
    """Send an email to someone."""
    return f"sent to {to}"


@tool
def pay_invoice(invoice: str) -> str:
    """Pay an invoice, once a person approves the payment."""
    answer = interrupt({"approve": f"pay {invoice}?"})
    return f"paid {invoice}" if answer == "yes" else f"not paid: {answer}"


@tool
def slow_lookup(query: str) -> str:
    """Look something up in the slow archive."""
    time.sleep(SLOW_TOOL_S)
    return f"found {query}"


_CALLS = {"email": ("send_email", {"to": "bob"}), "pay": ("pay_invoice", {"invoice": "INV-7"})}
_CALLS["archive"] = ("slow_lookup", {"query": "contract"})


def _reply(messages: list[BaseMessage], bound: list[str]) -> AIMessage:
    """Calls the tool its request names (where it is bound), then answers with the tool's result."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"Done: {last.content}")
    asked = str(last.content).lower() if isinstance(last, HumanMessage) else ""
    for word, (name, args) in _CALLS.items():
        if word in asked and name in bound:
            return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{name}"}])
    return AIMessage("ok")


def _model() -> ScriptedChatModel:
    return ScriptedChatModel(replies=[_reply])


_agent = create_memabra_agent(
    _model(),
    tools=[send_email, pay_invoice, slow_lookup],
    db=DB,
    router=HybridRouter(similarity=Similarity(encoder=None)),
    budget=ALL_TOOLS,
)
served = _agent.server_graph
plain = _agent.graph

_middleware = MemabraMiddleware(build_session(tools=[send_email], db=DB, budget=ALL_TOOLS))
_approvals = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
approvals = MemabraAgent(
    create_agent(_model(), tools=[send_email], middleware=[_middleware, _approvals]), _middleware.session
).server_graph


def graphs() -> dict[str, Any]:
    return {"served": served, "plain": plain, "approvals": approvals}
