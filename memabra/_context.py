"""A turn's candidates and the context built from the router's choice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memabra._catalog import Skill
from memabra._records import Candidate, CandidateKind, RegistryItem, Selection
from memabra._usage import tool_name

__all__ = ["assemble", "gather_candidates"]


def gather_candidates(
    memories: Sequence[RegistryItem], shared: Sequence[RegistryItem], kinds: Sequence[CandidateKind]
) -> list[Candidate]:
    """The user's memories and the shared skills and tools, once each, of the offered kinds."""
    out: dict[str, Candidate] = {}
    for item in list(memories) + [i for i in shared if i.kind is not CandidateKind.MEMORY]:
        if item.kind in kinds:
            out.setdefault(item.id, item.as_candidate())
    return list(out.values())


def assemble(selection: Selection, skills: Mapping[str, Skill]) -> tuple[str, tuple[str, ...]]:
    """The system-prompt text (chosen memories and skill instructions) and the chosen tools' names."""
    memories = [c for c in selection.chosen if c.kind is CandidateKind.MEMORY]
    chosen_skills = [skills[c.id] for c in selection.chosen if c.kind is CandidateKind.SKILL and c.id in skills]
    tools = tuple(tool_name(c.id, c.metadata) for c in selection.chosen if c.kind is CandidateKind.TOOL)
    parts = []
    if memories:
        parts.append("What you know about the user:\n" + "\n".join(f"- {m.text}" for m in memories))
    for skill in chosen_skills:
        parts.append(f"Skill '{skill.name}' ({skill.description}):\n{skill.body}")
    return "\n\n".join(parts), tools
