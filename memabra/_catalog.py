"""Skills and tools as routable candidates.

A skill is a named instruction document, like a SKILL.md: the router weighs its name and
description; its body enters the context only when it is chosen. A tool is a LangChain tool:
the router weighs its name, description and parameters; only chosen tools are bound to the model.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.utils.pydantic import model_json_schema

from memabra._errors import ConfigError
from memabra._records import CandidateKind, RegistryItem
from memabra._text import approx_tokens
from memabra.storage._injected_bodies import BODY_DIGEST_KEY, body_digest

__all__ = ["Skill", "load_skills", "skill_items", "tool_items", "as_tools"]

logger = logging.getLogger("memabra")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
# Function names the chat APIs accept: OpenAI and Anthropic take [A-Za-z0-9_-]{1,64}; Gemini also
# '.' and ':'. A name outside them fails every model call that binds the tool, so it fails here.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
_PORTABLE_TOOL_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
# Every line break str.splitlines knows, and the characters the log cannot store as they are.
_LINE_BREAK = re.compile(r"[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Skill:
    """``name`` and ``description`` are what the router weighs; ``body`` is injected when chosen."""

    name: str
    description: str
    body: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigError(f"skill name must be a str, not {type(self.name).__name__} ({self.name!r:.80})")
        # fullmatch: `$` would let a name end in a line break ('tone\n' is another id than 'tone')
        if not _NAME.fullmatch(self.name):
            raise ConfigError(f"skill name {self.name!r} must be 1-100 letters, digits, '_', '.' or '-'")
        for field, value in (("description", self.description), ("body", self.body)):
            if not isinstance(value, str):
                raise ConfigError(
                    f"skill {self.name!r}: its {field} must be a str, not {type(value).__name__} ({value!r:.80})"
                )
        if not self.description.strip():
            raise ConfigError(f"skill {self.name!r} needs a description: it is what the router weighs")
        if _LINE_BREAK.search(self.description):
            # it heads the skill's section of the system prompt: a line break would start a line of its own
            fix = (
                "strip the line break at its start or end (a triple-quoted string keeps one)"
                if not _LINE_BREAK.search(self.description.strip())
                else "join its lines with spaces and move longer instructions into the body"
            )
            raise ConfigError(
                f"skill {self.name!r}: its description must be one line (it heads the skill's part of the"
                f" system prompt): {fix}; got {self.description!r:.120}"
            )
        if not self.body.strip():
            raise ConfigError(f"skill {self.name!r} needs a body: it is what is injected when the skill is chosen")
        for field, value in (("description", self.description), ("body", self.body)):
            if _UNSTORABLE.search(value):
                # the log would keep another text (NUL dropped, a lone surrogate replaced) than the model was shown
                raise ConfigError(
                    f"skill {self.name!r}: its {field} holds a NUL byte or a lone surrogate, which the log cannot keep"
                )

    @classmethod
    def from_markdown(cls, text: str, *, default_name: str = "") -> Skill:
        """Parse a SKILL.md: YAML-style front matter with ``name`` and ``description``, then the body.

        A value may go on over indented lines (a YAML block, ``description: >``): its lines are
        joined by spaces, as YAML folds them."""
        name, description, body = default_name, "", text
        if text.startswith("---"):
            end = text.find("\n---", 3)
            if end == -1:
                raise ConfigError("SKILL.md front matter opens with '---' but never closes")
            fields = _front_matter(text[3:end])
            name = fields.get("name") or name
            description = fields.get("description", "")
            body = text[end + 4 :].lstrip("\n")
        return cls(name=name, description=description, body=body.strip())


# A YAML block scalar's header (`description: >-`, `|2`, `>+ # folded`): the value is on the indented lines below.
_BLOCK_HEADER = re.compile(r"^[>|](?:[+-]?[1-9]?|[1-9][+-])(?:\s+#.*)?$")


def _front_matter(block: str) -> dict[str, str]:
    """The top-level ``key: value`` pairs of a front matter, a value's lines joined to it: the lines
    indented deeper than its key, and blank lines among them (a block scalar's paragraphs)."""
    parts: dict[str, list[str]] = {}
    key: str | None = None
    key_indent = 0
    for line in block.strip("\n").splitlines():
        indent = len(line) - len(line.lstrip(" \t"))
        if key is not None and (not line.strip() or indent > key_indent):
            parts[key].append(line.strip())
            continue
        name, colon, value = line.partition(":")
        key = name.strip() if colon and not name.lstrip().startswith("#") else None
        key_indent = indent
        if key is not None:
            value = value.strip()
            parts[key] = [] if _BLOCK_HEADER.match(value) else [value]
    return {k: " ".join(p for p in v if p).strip().strip("'\"") for k, v in parts.items()}


def load_skills(directory: str | Path) -> list[Skill]:
    """Every ``*/SKILL.md`` (or ``*.md``) under ``directory``; a file that is not a valid skill is
    an error naming it."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"skills directory not found: {root}")
    files = sorted(root.glob("*/SKILL.md")) or sorted(root.glob("*.md"))
    skills = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
            skills.append(Skill.from_markdown(text, default_name=f.parent.name if f.name == "SKILL.md" else f.stem))
        except (ConfigError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{f}: {exc}") from exc
    return skills


def skill_items(skills: Iterable[Skill], owner: str = "") -> list[RegistryItem]:
    """Skills as registry rows; one name given twice is refused (see :func:`_require_unique`)."""
    skills = list(skills)
    _require_unique("skill", [s.name for s in skills])
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
            # logged with every decision that offers it: the log names the body it could inject
            metadata={BODY_DIGEST_KEY: body_digest(s.body)},
        )
        for s in skills
    ]


def describe_tool(tool: BaseTool, params: dict[str, Any] | None = None) -> str:
    params = tool_args(tool) if params is None else params
    described = ", ".join(
        f"{name} ({spec.get('description', spec.get('type', ''))})".replace(" ()", "") for name, spec in params.items()
    )
    return f"{tool.name}: {tool.description} Parameters: {described or 'none'}"


def _call_schema(tool: BaseTool) -> dict[str, Any]:
    """The whole JSON schema of the tool's call, as ``BaseTool.args`` reads its properties from:
    an MCP tool's ``inputSchema`` as the server sent it, or the pydantic model's schema."""
    if isinstance(tool.args_schema, dict):
        return tool.args_schema
    schema = tool.tool_call_schema
    return schema if isinstance(schema, dict) else model_json_schema(schema)


def tool_args(tool: BaseTool) -> dict[str, Any]:
    """The tool's parameter schema; one no chat API could be sent is an error naming the tool."""
    try:
        schema = _call_schema(tool)
        # an MCP tool without arguments may come as {"type": "object"} with no properties (the
        # TypeScript SDK's default): a valid schema the model is sent as it is, so none, not an error
        if schema.get("type") == "object" and "properties" not in schema:
            return {}
        args = dict(tool.args or {})
    except Exception as exc:  # noqa: BLE001 - pydantic raises several kinds for a schema it cannot write
        raise ConfigError(f"tool {tool.name!r}: its parameter schema cannot be built ({exc})") from exc
    return args


def _definitions(tool: BaseTool) -> dict[str, Any]:
    """The definitions the parameters' ``$ref`` point into (a nested pydantic model, an MCP
    server's ``$defs``), which ``BaseTool.args`` leaves out though the model is sent them whole."""
    schema = _call_schema(tool)
    return {key: schema[key] for key in ("$defs", "definitions") if schema.get(key)}


def _schema_text(tool: BaseTool, args: dict[str, Any]) -> str:
    try:
        return json.dumps(args, sort_keys=True)
    except (TypeError, ValueError) as exc:  # a default or enum value JSON cannot hold (a datetime, an object)
        raise ConfigError(
            f"tool {tool.name!r}: its parameter schema cannot be written as JSON ({exc}); give JSON values"
            " (strings, numbers, booleans, lists, objects) as its defaults and enums"
        ) from exc


def _bound_spec(tool: BaseTool) -> str:
    """The function spec ``bind_tools`` sends for ``tool`` (LangChain's OpenAI form, which the other
    providers' formats are converted from): name, description and the parameters' JSON schema
    with what is required, as JSON with sorted keys so one tool gives one text."""
    try:
        spec = convert_to_openai_tool(tool)
    except Exception as exc:  # noqa: BLE001 - pydantic and LangChain raise several kinds for a spec they cannot write
        raise ConfigError(f"tool {tool.name!r}: its function spec for the model cannot be built ({exc})") from exc
    return _schema_text(tool, spec)


def tool_items(tools: Iterable[BaseTool], owner: str = "") -> list[RegistryItem]:
    """Tools as registry rows; one name given twice is refused (see :func:`_require_unique`).

    A row's body is the function spec bound to the model when the tool is chosen; its tokens
    are still counted from the parameters (the router's cost feature, unchanged) and the
    definitions they refer to."""
    tools = list(tools)
    _require_unique("tool", [t.name for t in tools])
    items = []
    for tool in tools:
        args = tool_args(tool)
        schema = _schema_text(tool, args)
        definitions = _definitions(tool)
        if definitions:  # counted too: a huge schema's bulk is often there; a flat tool's count is as before
            schema += _schema_text(tool, definitions)
        spec = _bound_spec(tool)
        items.append(
            RegistryItem(
                kind=CandidateKind.TOOL,
                id=f"tool:{tool.name}",
                owner=owner,
                name=tool.name,
                text=describe_tool(tool, args),
                body=spec,
                tokens=approx_tokens(tool.description) + max(1, len(schema) // 4),
                source="tool",
                metadata={BODY_DIGEST_KEY: body_digest(spec)},
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
    _require_unique("tool", names)
    for name in names:
        _check_tool_name(name)
    return out


_WHY_UNIQUE = {
    "tool": "tools from different registries that share a name need distinct names (e.g. a prefix naming the"
    " registry), as the model calls a tool by name",
    # two skills under one id: the router would weigh one's description while the other's body is
    # injected, and the log would say the first was
    "skill": "a skill is routed, logged and injected by its name, so two under one name would log one and"
    " inject the other",
}


def _require_unique(kind: str, names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"{kind} names must be unique, got {twice} more than once: {_WHY_UNIQUE[kind]}")


def _check_tool_name(name: str) -> None:
    if not _TOOL_NAME.match(name):
        raise ConfigError(f"tool name {name!r} is refused by chat model APIs: use 1-64 letters, digits, '_' or '-'")
    if not _PORTABLE_TOOL_NAME.match(name):
        logger.warning("tool name %r: OpenAI and Anthropic refuse '.' and ':' in tool names (Gemini takes them)", name)
