"""``find_tools``: a tool the model can call to fetch a tool the router left out (bigtool-style).

Opt-in (``create_memabra_agent(..., tool_search=True)``). It is bound next to the routed tools;
the model calls it with what it needs to do and gets the best matching registry tools that are
not bound yet (by the hybrid prior over tool names, descriptions and parameters). Those tools are
bound for the rest of the turn. When the model then calls one successfully, the turn records it
as needed-and-missed: ``relevant_ids`` feedback on the episode, an Ht miss in the reward and the
``missing`` outcome the learner reads from the log with it. So does a call to
a registry tool the turn was not given (refused, but the model named what it needed). A run
restricted to some tools (``allowed_tools``) finds only those: the others are not the turn's to
fetch, and a call to one is refused without being taken for a miss (the router was never offered it).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import replace

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from memabra._errors import ConfigError
from memabra._recall import rank
from memabra._records import CandidateKind, Feedback, FeedbackKind, RegistryItem
from memabra._turns import MAX_TURNS_IN_FLIGHT
from memabra.router import CachingEncoder

__all__ = ["FIND_TOOLS", "FIND_TOOLS_SOURCE", "REFUSED_SOURCE", "ToolSearch", "record_missed"]

logger = logging.getLogger("memabra")

FIND_TOOLS = "find_tools"
# feedback sources of a needed-and-missed tool: fetched with find_tools, or called without being given
FIND_TOOLS_SOURCE = "memabra.find_tools"
REFUSED_SOURCE = "memabra.refused_call"
# Tools returned per search: enough for a two-tool step (cd then mv), few enough to stay cheap.
FIND_LIMIT = 3

# ToolNode runs a round's calls on threads: two misses of one episode must not lose each other.
_MISSED_LOCK = threading.Lock()
# camelCase boundaries: "startEngine" must match a request to "start the engine"
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# how a model writes tool names in a request: "get_weather", "`get_weather`", "get_weather()",
# "get_weather, set_timer"
_NAME_SEPARATORS = re.compile(r"[\s,;(]+")
_NAME_PUNCTUATION = "`'\"()[]{}.:!?"
_IDENTIFIER = re.compile(r"[^A-Za-z]|(?<=.)[A-Z]")  # get_weather, math.sqrt, v2, getWeather

_DESCRIPTION = (
    "Search for tools you were not given. Call it with a short description of what you need to do "
    "(e.g. 'set a countdown timer'); the best matching tools become available for the rest of this turn."
)


class _FindToolsArgs(BaseModel):
    # declared once: inferring a schema from a function (StructuredTool.from_function) costs about
    # a millisecond, and a turn's tool is built for every model call
    query: str = Field(description="What you need to do, in a few words.")


class ToolSearch:
    """The ``find_tools`` tool over a registry of tool items, and what it fetched per turn."""

    def __init__(
        self,
        items: Sequence[RegistryItem],
        encoder: CachingEncoder | None,
    ) -> None:
        self.items = [i for i in items if i.kind is CandidateKind.TOOL]
        if any(i.name == FIND_TOOLS for i in self.items):
            # the model would be given two tools of one name, and memabra answers the call itself
            raise ConfigError(f"a tool named {FIND_TOOLS!r} clashes with tool_search=True's own; rename the tool")
        self._ranked = [_searchable(i) for i in self.items]
        self._shown = {i.name: i.text for i in self.items}
        self.encoder = encoder
        # by turn id, newest last: a turn that never reaches ``end`` here (its run cancelled, or
        # paused and resumed in another worker) is dropped once MAX_TURNS_IN_FLIGHT newer turns fetched
        self._fetched: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()

    def tool(
        self, turn_id: str, bound: Sequence[str], bind: object, allowed: Collection[str] | None = None
    ) -> BaseTool:
        """The ``find_tools`` tool for one turn; ``bind(names)`` makes fetched tools available;
        ``allowed`` (``None``: all) the tools the run may use, the only ones it finds."""

        def find_tools(query: str) -> str:
            return self.search(turn_id, query, bound, bind, allowed)

        return StructuredTool(name=FIND_TOOLS, description=_DESCRIPTION, args_schema=_FindToolsArgs, func=find_tools)

    def search(
        self, turn_id: str, query: str, bound: Sequence[str], bind: object, allowed: Collection[str] | None = None
    ) -> str:
        if not query.strip():
            return "Describe what you need to do, e.g. 'convert metric and imperial units'."
        with self._lock:
            fetched = self._fetched.setdefault(turn_id, set())
            self._fetched.move_to_end(turn_id)
            while len(self._fetched) > MAX_TURNS_IN_FLIGHT:
                self._fetched.popitem(last=False)
        pool = [
            i
            for i in self._ranked
            if i.name not in bound and i.name not in fetched and (allowed is None or i.name in allowed)
        ]
        named = _named(pool, query)
        rest = [i for i in pool if i not in named]
        best = (named + [item for item, score in rank(rest, query, self.encoder)])[:FIND_LIMIT]
        if not best:
            return "No further tools match."
        names = [i.name for i in best]
        fetched.update(names)
        bind(names)  # type: ignore[operator]
        return "Now available:\n" + "\n".join(f"- {self._shown[n]}" for n in names)

    def fetched(self, turn_id: str) -> set[str]:
        with self._lock:
            return self._fetched.get(turn_id, set())

    def used(
        self, turn_id: str, episode_id: str, name: str, feedback: list[Feedback], *, left_out: bool = False
    ) -> None:
        """A tool was called successfully: when ``find_tools`` fetched it this turn (or ``left_out``:
        the turn bound it though the router did not choose it, e.g. fetched before the turn paused
        and resumed in another process) the turn needed it and the router missed it."""
        if name == FIND_TOOLS or not (left_out or name in self.fetched(turn_id)):
            return
        record_missed(episode_id, name, feedback, FIND_TOOLS_SOURCE)

    def end(self, turn_id: str) -> None:
        with self._lock:
            self._fetched.pop(turn_id, None)


def record_missed(episode_id: str, name: str, feedback: list[Feedback], source: str) -> None:
    """Record tool ``name`` as needed by the episode and left out by the router, once per episode:
    ``relevant_ids`` feedback, an Ht miss in the reward and the ``missing`` outcome the learner
    reads from the log (``memabra learner``, ``replay``)."""
    candidate = f"tool:{name}"
    with _MISSED_LOCK:
        if any(candidate in (f.payload.get("relevant_ids") or ()) for f in feedback):
            return
        feedback.append(Feedback(episode_id, FeedbackKind.IMPLICIT, source, {"relevant_ids": [candidate]}))
    logger.info("%s was needed and left out by the router (%s)", name, source)


def _named(pool: Sequence[RegistryItem], query: str) -> list[RegistryItem]:
    """The tools ``query`` names exactly, in the order it names them: a model refused a tool it
    knows asks for it by name, and similar names rank above it by words alone (``create_ticket``
    came fourth on the BFCL registry, behind ``close_ticket``, ``get_ticket``, ``resolve_ticket``)."""
    exact = {i.name: i for i in pool}
    # a name in another case names the tool only where no other tool has that name in some case:
    # real registries hold pairs that differ only by case (BFCL's calculate_BMI and calculate_bmi)
    by_folded: dict[str, list[RegistryItem]] = {}
    for i in pool:
        by_folded.setdefault(i.name.casefold(), []).append(i)
    words = [w.strip(_NAME_PUNCTUATION) for w in _NAME_SEPARATORS.split(query.strip())]
    named: list[RegistryItem] = []
    for word in words:
        item = exact.get(word)
        if item is None:
            spellings = by_folded.get(word.casefold(), [])
            item = spellings[0] if len(spellings) == 1 else None
        # a plain word ("add a contact") names a tool only standing alone: it is the request's
        # English otherwise, and the tool called add would take a fetched tool's place
        if item is None or item in named or (len(words) > 1 and not _IDENTIFIER.search(word)):
            continue
        named.append(item)
    return named


def _searchable(item: RegistryItem) -> RegistryItem:
    """The item as find_tools ranks it: camelCase words split, so they match the words of a request
    (the router's own view of the item is left as it is)."""
    split = _CAMEL.sub(" ", item.text)
    return item if split == item.text else replace(item, text=f"{item.text}\n{split}")
