"""How much of a turn's payloads the episode log keeps: a tool's result, error and arguments, a
model call's error and the turn's answer, each up to a named size, with a note saying what was
left out. Only the log's copy is cut: what the model sees (the ToolMessage, the answer the caller
gets) is never changed by it.

A tool that fetches a web page (2 MB of HTML), runs a query (50,000 rows as JSON) or reads a log
file (5 MB) used to put all of it in the log at every call: the log grew by the payload's size
per turn, the admin's turn page and ``episodes show`` read it back whole, and no reader of the
log needs it (the reward, usage, corrections, MemPO and offline evaluation read a step's name,
status and arguments, never its result)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ARGUMENTS_CUT_KEY",
    "MAX_LOGGED_ARGUMENT",
    "MAX_LOGGED_TEXT",
    "cut_around",
    "cut_arguments",
    "cut_text",
    "dumps",
    "left_out",
]

# Longest text the log keeps of one tool result, tool or model error, or answer, in characters:
# about 2,500 tokens, three screens of the admin's turn page, enough to see what a tool returned
# and how it ended. Longer, the log keeps its first MAX - 2,200 and its last 2,000 characters
# (a log file's or a traceback's end is where its error is) around a note of at most 200 giving
# the full size and a SHA-256 prefix, so equal payloads still read equal in the log. A 2 MB page
# costs about 10 KB a call rather than 2 MB.
MAX_LOGGED_TEXT = 10_000
_TAIL = 2_000
_NOTE_ROOM = 200
# Longest string of a tool call's arguments kept when the arguments' JSON exceeds MAX_LOGGED_TEXT
# (a file tool's ``content``, a bulk insert's rows): each is cut the same way, so the arguments
# keep their keys; where the cut JSON is still too long (thousands of short values), the log keeps
# ``{ARGUMENTS_CUT_KEY: <the JSON, cut>}`` instead.
MAX_LOGGED_ARGUMENT = 2_500
ARGUMENTS_CUT_KEY = "memabra_arguments_cut"

_NOTE = re.compile(
    r"\n\[memabra: (?P<left>[\d,]+) of (?P<total>[\d,]+) characters not logged"
    r" \((?P<bytes>[\d,]+) bytes UTF-8, sha256 (?P<sha>[0-9a-f]{16})\)\]\n"
)


def cut_text(text: str | None, limit: int = MAX_LOGGED_TEXT) -> str | None:
    """``text`` as the log keeps it: whole up to ``limit`` characters; longer, its start and end
    around a note naming how many characters were left out of how many (and its UTF-8 size and a
    SHA-256 prefix). The result is never longer than ``limit``, so cutting twice changes nothing."""
    if text is None or len(text) <= limit:
        return text
    return cut_around(text, limit, "not logged")[0]


def cut_around(text: str, limit: int, missing: str, where: str = "") -> tuple[str, int]:
    """``text`` longer than ``limit``: its start and end around the note :func:`cut_text` writes,
    saying the characters left out are ``missing`` (and ``where`` they are, if anywhere), and how
    many characters were left out. The episode document cuts with its own wording ("not in this
    document; the log holds them")."""
    raw = text.encode("utf-8", "surrogatepass")
    tail = min(_TAIL, limit // 5)
    head = limit - tail - _NOTE_ROOM
    left = len(text) - head - tail
    note = (
        f"\n[memabra: {left:,} of {len(text):,} characters {missing}"
        f" ({len(raw):,} bytes UTF-8, sha256 {hashlib.sha256(raw).hexdigest()[:16]}){where}]\n"
    )
    return text[:head] + note + text[len(text) - tail :], left


def left_out(text: str | None) -> tuple[int, int] | None:
    """``(characters left out, full size in characters)`` of a text :func:`cut_text` cut; ``None``
    for a text kept whole."""
    found = _NOTE.search(text or "")
    if found is None:
        return None
    return int(found["left"].replace(",", "")), int(found["total"].replace(",", ""))


def dumps(value: Any) -> str:
    """Arguments' JSON as the caps measure it."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _cut_strings(value: Any) -> Any:
    if isinstance(value, str):
        return cut_text(value, MAX_LOGGED_ARGUMENT)
    if isinstance(value, Mapping):
        return {k: _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value


def cut_arguments(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool call's arguments (JSON values already) as the log keeps them: whole while their
    JSON is at most :data:`MAX_LOGGED_TEXT` characters; else each string longer than
    :data:`MAX_LOGGED_ARGUMENT` cut (:func:`cut_text`); else ``{ARGUMENTS_CUT_KEY: <the whole
    JSON, cut>}``. Different arguments stay different (the note carries the cut text's hash): the
    reward's repeated-failed-call check compares them."""
    if len(dumps(arguments)) <= MAX_LOGGED_TEXT:
        return arguments
    cut = _cut_strings(arguments)
    if len(dumps(cut)) <= MAX_LOGGED_TEXT:
        return dict(cut)
    return {ARGUMENTS_CUT_KEY: cut_text(dumps(arguments))}
