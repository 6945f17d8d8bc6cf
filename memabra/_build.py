"""Building a :class:`~memabra.RoutingSession` from what a user passes: a database URL or log, a memory
backend or LangGraph store, tools, skills, a router, and the settings."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.store.base import BaseStore

from memabra._catalog import Skill, as_tools, skill_items, tool_items
from memabra._errors import ConfigError
from memabra._memory import FactExtractor, MemoryBackend
from memabra._records import Budget, CandidateKind, RegistryItem
from memabra._session import RoutingSession
from memabra._settings import SessionSettings
from memabra._sql_memory import SQLMemory
from memabra._store_memory import StoreMemory
from memabra._token_count import TokenCounts
from memabra.router import Router
from memabra.storage import EpisodeLog, open_log

__all__ = ["build_session", "resolve_model"]

logger = logging.getLogger("memabra")


def resolve_model(model: BaseChatModel | str) -> BaseChatModel:
    """A LangChain chat model, or one built by ``init_chat_model`` from a ``"provider:name"`` string."""
    if isinstance(model, BaseChatModel):
        return model
    if isinstance(model, str):
        from langchain.chat_models import init_chat_model

        return init_chat_model(model)
    raise ConfigError(f"model must be a LangChain chat model or a 'provider:name' string, got {type(model).__name__}")


def _memory_backend(
    memory: MemoryBackend | BaseStore | None, store: BaseStore | None, log: EpisodeLog
) -> MemoryBackend:
    if memory is None:
        return StoreMemory(store, log=log) if store is not None else SQLMemory(log)
    if isinstance(memory, BaseStore):
        return StoreMemory(memory, log=log)
    if isinstance(memory, MemoryBackend):
        return memory
    raise ConfigError(f"memory must be a MemoryBackend or a LangGraph BaseStore, got {type(memory).__name__}")


def _check_router_and_skills(router: object, skills: Sequence[object]) -> None:
    """Refuse, before any database is opened, the shapes that would fail deep inside the session
    with an ``AttributeError``: a router given by name, a skill that is not a :class:`Skill`."""
    if router is not None and not isinstance(router, Router):
        raise ConfigError(
            "router must be a memabra.router.Router, such as VWRouter() or LinearRouter(); "
            f"got {router!r} (names such as 'vw' are for the CLI's --policy and --learner)"
        )
    for skill in skills:
        if not isinstance(skill, Skill):
            raise ConfigError(
                "skills must be memabra.Skill(name, description, body) (or Skill.from_markdown(text)), "
                f"got a {type(skill).__name__}: {skill!r:.80}"
            )


def _refuse_unchoosable_skills(
    skills: Sequence[Skill], settings: SessionSettings | None, overrides: dict[str, Any]
) -> None:
    """Refuse, before anything is registered, a skill that alone costs more than the budget: the
    router never chooses it (a chosen slate never exceeds ``max_tokens``), and unlike a tool,
    which ``find_tools`` can still fetch, nothing else would ever inject it. Counted as the session
    counts it: ``approx_tokens`` of its body, or its prompt section by the ``token_counter``."""
    wanted = {k: overrides[k] for k in ("budget", "kinds", "token_counter") if k in overrides}
    resolved = (settings or SessionSettings()).updated(**wanted)
    budget = resolved.budget
    if (
        not skills
        or budget.max_tokens is None
        or not budget.slots_for(CandidateKind.SKILL)
        or CandidateKind.SKILL not in resolved.offered_kinds
    ):
        return
    items = skill_items(skills)
    if resolved.token_counter is not None:
        items = TokenCounts(resolved.token_counter).shared(items, {f"skill:{s.name}": s for s in skills})
    over = [i for i in items if i.tokens > budget.max_tokens]
    if over:
        named = ", ".join(f"{i.name!r} ({i.tokens} tokens)" for i in over)
        raise ConfigError(
            f"skill(s) {named} cost more than Budget.max_tokens={budget.max_tokens}: the router could never choose"
            " them, so their bodies would never be injected; shorten or split them, or raise max_tokens"
            " (nothing was registered)"
        )


def _warn_unchoosable(items: Sequence[RegistryItem], budget: Budget) -> None:
    """Warn of each tool that alone costs more than the budget: the router never chooses it (a
    chosen slate never exceeds ``max_tokens``), so without this it would just never be bound. A
    huge schema (an MCP server's tool with a large ``$defs``) is the usual cause."""
    max_tokens = budget.max_tokens
    if max_tokens is None or not budget.slots_for(CandidateKind.TOOL):  # no limit, or no tool is routed at all
        return
    for item in items:
        if item.kind is CandidateKind.TOOL and item.tokens > max_tokens:
            logger.warning(
                "tool %r counts %d tokens (its description and parameter schema), more than Budget.max_tokens=%d:"
                " the router can never choose it (find_tools can still fetch it); trim its schema or raise max_tokens",
                item.name,
                item.tokens,
                max_tokens,
            )


def build_session(
    *,
    tools: Sequence[BaseTool | Any] = (),
    skills: Sequence[Skill] = (),
    memory: MemoryBackend | BaseStore | None = None,
    store: BaseStore | None = None,
    router: Router | None = None,
    db: str | EpisodeLog | None = None,
    extractor: FactExtractor | None = None,
    settings: SessionSettings | None = None,
    **overrides: Any,
) -> RoutingSession:
    """The routing loop behind the agent, the middleware and the nodes.

    ``settings`` (a :class:`~memabra.SessionSettings`) says how to route and learn; keyword
    ``overrides`` (``budget``, ``reward``, ``learn``, ``snapshot_every``, ``local_credit``, ``kinds``,
    ``reload_interval_s``, ``commit_interval_s``, ``token_counter``) replace single fields of it.
    """
    _check_router_and_skills(router, skills)
    _refuse_unchoosable_skills(skills, settings, overrides)
    if isinstance(db, EpisodeLog):
        log, owns_log = db, False
    else:
        log, owns_log = open_log(db), True
    try:
        if router is None:
            from memabra.router import LinearRouter

            router = LinearRouter()
        session = RoutingSession(
            router=router,
            log=log,
            memory=_memory_backend(memory, store, log),
            skills=skills,
            tool_items_=tool_items(as_tools(tools)),
            extractor=extractor,
            settings=settings,
            owns_log=owns_log,
            **overrides,
        )
        # the session's counts: its token_counter's where it has one
        _warn_unchoosable(session._shared.items, session.budget)
        return session
    except BaseException:
        if owns_log:
            log.close()
        raise
