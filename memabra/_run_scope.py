"""A turn's scope: the user it routes for and the tools its run may use.

``allowed_tools`` narrows the session's tools for one run (a user's role gates ``refund_order``).
It is applied where the turn is routed, not where the model is called: the router is offered only
the allowed tools, so the logged decision's offered set is what the run could use and its
propensities, the learner's credit and offline evaluation are about choices that could happen.
A tool hidden from the model after routing would leave the log crediting a choice the model never
had. Memories and skills are offered as before.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from memabra._errors import InvalidRecordError
from memabra._memory_records import storable_user
from memabra._records import CandidateKind, RegistryItem
from memabra._usage import tool_name

__all__ = ["SharedItems", "allowed_tool_names", "require_user"]

# Tool names an error lists: enough for an app's own set, not a 500-tool registry's.
_MAX_LISTED = 20


def require_user(user_id: object) -> None:
    if not isinstance(user_id, str) or not user_id:
        raise InvalidRecordError("a memabra turn needs a user_id (pass context={'user_id': ...})")
    # here, not only in the memory backends: the turn's episode is logged under the id as the log
    # stores it, so a backend of the application's own that keeps "a\x00nn" apart would still see
    # the turn logged, corrected and credited as ann's
    storable_user(user_id)


def allowed_tool_names(value: object) -> frozenset[str] | None:
    """``allowed_tools`` as given (a collection of tool names; ``None``: every tool) as a set."""
    if value is None:
        return None
    # a bare string is a collection too: "refund_order" would allow the tools named r, e, f...
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise InvalidRecordError(
            f"allowed_tools must be a list of tool names (None: every tool the agent has), got {value!r}"
        )
    bad = [n for n in value if not isinstance(n, str) or not n]
    if bad:
        raise InvalidRecordError(f"allowed_tools must hold tool names (non-empty strings), got {bad!r}")
    return frozenset(value)


class SharedItems:
    """The session's own skills and tools (the candidates every user shares), and those a run may
    offer the router."""

    def __init__(self, items: Sequence[RegistryItem]) -> None:
        self.items = tuple(items)
        self.tool_ids = frozenset(i.id for i in self.items if i.kind is CandidateKind.TOOL)
        # by the name the model binds it under: what ``allowed_tools`` names
        self._tool_names = {tool_name(i.id, i.metadata) for i in self.items if i.kind is CandidateKind.TOOL}

    def allowed(self, allowed_tools: Collection[str] | None) -> tuple[RegistryItem, ...]:
        """The items a run with ``allowed_tools`` may be offered. A name the session has no tool of
        is refused: a typo must not silently take a tool away (or seem to grant one)."""
        names = allowed_tool_names(allowed_tools)
        if names is None:
            return self.items
        unknown = sorted(names - self._tool_names)
        if unknown:
            raise InvalidRecordError(
                f"allowed_tools names {', '.join(map(repr, unknown))}, which this agent has no tool of"
                f" ({_listed(self._tool_names)})"
            )
        return tuple(i for i in self.items if i.kind is not CandidateKind.TOOL or tool_name(i.id, i.metadata) in names)


def _listed(names: Collection[str]) -> str:
    if not names:
        return "it has no tools"
    if len(names) > _MAX_LISTED:
        return f"it has {len(names)} tools"
    return "its tools: " + ", ".join(sorted(names))
