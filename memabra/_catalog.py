"""Skills and tools as routable candidates.

A skill is a named instruction document, like a SKILL.md: the router weighs its name and
description; its body enters the context only when it is chosen. A tool is a LangChain tool:
the router weighs its name, description and parameters; only chosen tools are bound to the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from memabra._errors import ConfigError
from memabra._records import CandidateKind, RegistryItem
from memabra._text import approx_tokens

__all__ = ["Skill", "load_skills", "skill_items", "tool_items", "as_tools"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")


@dataclass(frozen=True, slots=True)
class Skill:
    """``name`` and ``description`` are what the router weighs; ``body`` is injected when chosen."""

    name: str
    description: str
    body: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(f"skill name {self.name!r} must be 1-100 letters, digits, '_', '.' or '-'")
        if not self.description.strip():
            raise ConfigError(f"skill {self.name!r} needs a description: it is what the router weighs")

    @classmethod
    def from_markdown(cls, text: str, *, default_name: str = "") -> Skill:
        """Parse a SKILL.md: YAML-style front matter with ``name`` and ``description``, then the body."""
        name, description, body = default_name, "", text
        if text.startswith("---"):
            end = text.find("\n---", 3)
            if end == -1:
                raise ConfigError("SKILL.md front matter opens with '---' but never closes")
            for line in text[3:end].strip().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "name":
                    name = value.strip().strip("'\"")
                elif key.strip() == "description":
                    description = value.strip().strip("'\"")
            body = text[end + 4 :].lstrip("\n")
        return cls(name=name, description=description, body=body.strip())


def load_skills(directory: str | Path) -> list[Skill]:
    """Every ``*/SKILL.md`` (or ``*.md``) under ``directory``."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"skills directory not found: {root}")
    files = sorted(root.glob("*/SKILL.md")) or sorted(root.glob("*.md"))
    return [
        Skill.from_markdown(f.read_text(), default_name=f.parent.name if f.name == "SKILL.md" else f.stem)
        for f in files
    ]


def skill_items(skills: Iterable[Skill], owner: str = "") -> list[RegistryItem]:
    return [
        RegistryItem(
            kind=CandidateKind.SKILL,
            id=f"skill:{s.name}",
            owner=owner,
            name=s.name,
            text=f"{s.name}: {s.description}",
            body=s.body,
            tokens=approx_tokens(s.body),
            source="skill",
        )
        for s in skills
    ]


def describe_tool(tool: BaseTool) -> str:
    params = tool.args or {}
    described = ", ".join(
        f"{name} ({spec.get('description', spec.get('type', ''))})".replace(" ()", "") for name, spec in params.items()
    )
    return f"{tool.name}: {tool.description} Parameters: {described or 'none'}"


def tool_items(tools: Iterable[BaseTool], owner: str = "") -> list[RegistryItem]:
    items = []
    for tool in tools:
        schema = json.dumps(tool.args, sort_keys=True)
        items.append(
            RegistryItem(
                kind=CandidateKind.TOOL,
                id=f"tool:{tool.name}",
                owner=owner,
                name=tool.name,
                text=describe_tool(tool),
                body=schema,
                tokens=approx_tokens(tool.description) + max(1, len(schema) // 4),
                source="tool",
            )
        )
    return items


def as_tools(tools: Sequence[BaseTool | Any]) -> list[BaseTool]:
    """LangChain tools as given, plain functions wrapped as structured tools."""
    out: list[BaseTool] = []
    for t in tools:
        if isinstance(t, BaseTool):
            out.append(t)
        elif callable(t):
            out.append(StructuredTool.from_function(t))
        else:
            raise ConfigError(f"not a tool: {t!r} (give a LangChain BaseTool or a documented function)")
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"tool names must be unique, got {sorted(n for n in names if names.count(n) > 1)}")
    return out
