"""The agent the cross-process tests run in each worker: ``create_agent`` with memabra's
middleware, one tool (``send_email``), a scripted model, and a checkpointer shared between
processes (:mod:`savers`); ``approvals`` adds a human approval before each e-mail."""

from __future__ import annotations

from typing import Any


def mail_agent(log: Any, replies: list[Any], saver: Any, *, approvals: bool = False) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.tools import tool

    from fakes import ScriptedChatModel
    from memabra import Budget, CandidateKind, MemabraAgent
    from memabra._agent import build_session
    from memabra._middleware import MemabraMiddleware
    from memabra.router import HybridRouter, Similarity

    @tool
    def send_email(to: str) -> str:
        """Send an email to someone."""
        return f"sent to {to}"

    budget = Budget(max_tokens=4000, slots={CandidateKind.MEMORY: 5, CandidateKind.SKILL: 2, CandidateKind.TOOL: 3})
    router = HybridRouter(similarity=Similarity(encoder=None))
    middleware = MemabraMiddleware(build_session(tools=[send_email], db=log, budget=budget, router=router))
    stack: list[Any] = [middleware]
    if approvals:
        stack.append(HumanInTheLoopMiddleware(interrupt_on={"send_email": True}))
    graph = create_agent(ScriptedChatModel(replies=replies), tools=[send_email], middleware=stack, checkpointer=saver)
    return MemabraAgent(graph, middleware.session)
