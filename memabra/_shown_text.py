"""A logged payload as a reader is shown it: the admin's episode page and ``memabra episodes show``.

The log keeps a tool's result, an error and the answer cut to :data:`~memabra._log_caps.MAX_LOGGED_TEXT`
characters around a note saying how much was not logged (:func:`memabra._log_caps.cut_text`); a
turn logged before that keeps them whole, megabytes of them. A reader is shown, of either, the
text as pieces: the text itself, each cap note as its own sentence (never as bracket text in the
middle of a result), and, where the value is longer than the reader's room, its head and tail
around a piece saying how many characters are not shown here (a link or ``--full`` shows them).
Pure Python, no admin extra: the CLI and the admin view both read it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from memabra._log_caps import MAX_LOGGED_TEXT

__all__ = ["ROOM", "Piece", "ShownText", "format_bytes", "shown_text"]

# The note cut_text writes (memabra/_log_caps.py), on its own lines in a result, an error or an
# answer, and inside a JSON string of a tool call's arguments (where json.dumps writes each newline
# as the two characters backslash and n). tests/admin/test_admin_long_payloads.py checks that what
# cut_text writes is read here.
_FIELDS = (
    r"\[memabra: (?P<left>[\d,]+) of (?P<total>[\d,]+) characters not logged"
    r" \((?P<bytes>[\d,]+) bytes UTF-8, sha256 (?P<sha>[0-9a-f]{16})\)\]"
)
_NOTE = re.compile(rf"(?:\n|\\n){_FIELDS}(?:\n|\\n)")

# How much of a value a reader is shown whole: as much as the log keeps of one (a newer turn's
# payloads are always shown whole, their note read out); a longer one, logged before the log cut
# payloads, is shown as the log would now keep it, its first ROOM - 2,200 and last 2,000 characters.
ROOM = MAX_LOGGED_TEXT


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of a shown value. ``kind``: ``text`` (the value's own characters), ``not_logged``
    (a note of the log's cap, as a sentence) or ``not_shown`` (the characters left out here, as a
    sentence)."""

    kind: Literal["text", "not_logged", "not_shown"]
    text: str


@dataclass(frozen=True, slots=True)
class ShownText:
    """``pieces``: what to show, in order. ``chars``: the logged value's length. ``hidden``: how many
    of its characters are not shown (0: all are, ``not_shown`` pieces absent)."""

    pieces: tuple[Piece, ...]
    chars: int
    hidden: int

    @property
    def cut(self) -> bool:
        return self.hidden > 0


def format_bytes(size: int) -> str:
    """``5.0 MB``, ``312.4 kB``, ``900 bytes`` (decimal units, as the README's sizes)."""
    if size >= 1_000_000:
        return f"{size / 1_000_000:,.1f} MB"
    if size >= 1_000:
        return f"{size / 1_000:,.1f} kB"
    return f"{size} bytes"


def _not_logged(match: re.Match[str]) -> Piece:
    size = int(match["bytes"].replace(",", ""))
    return Piece(
        "not_logged",
        f"{match['left']} of {match['total']} characters not logged (the whole value: {format_bytes(size)},"
        f" {match['bytes']} bytes UTF-8, sha256 {match['sha']})",
    )


# Joins what follows to what precedes: a zero width joiner, variation selectors, skin tones.
_JOINS = frozenset(
    ["\u200d", "\u20e3", *map(chr, range(0xFE00, 0xFE10)), *map(chr, range(0x1F3FB, 0x1F400))]
    + [chr(c) for c in range(0xE0020, 0xE0080)]  # an emoji tag sequence's tags
)
_REGIONAL = range(0x1F1E6, 0x1F200)
# at most this far a cut moves to a boundary (a run of stacked accents is cut within itself)
_CLUSTER_REACH = 32


def _inside_cluster(text: str, at: int) -> bool:
    """Whether a cut before ``text[at]`` splits what a reader sees as one character."""
    if at <= 0 or at >= len(text):
        return False
    before, char = text[at - 1], text[at]
    if char in _JOINS or before == "\u200d" or unicodedata.category(char) in ("Mn", "Mc", "Me"):
        return True
    if before == "\r" and char == "\n":
        return True
    if ord(char) in _REGIONAL and ord(before) in _REGIONAL:
        # flags pair regional indicators from the start of their run: odd ones before = a pair's second
        run = 0
        while at - run - 1 >= 0 and ord(text[at - run - 1]) in _REGIONAL:
            run += 1
        return run % 2 == 1
    return False


def _cluster_start(text: str, at: int, step: int) -> int:
    """``at``, or the nearest cut before (``step`` -1) or after (+1) it that splits no character."""
    for moved in range(_CLUSTER_REACH):
        cut = at + step * moved
        if not _inside_cluster(text, cut):
            return cut
    return at


def shown_text(text: str, room: int = ROOM, *, tail: int | None = None, more: str = "") -> ShownText:
    """``text`` as pieces to show: whole up to ``room`` characters (the log's notes as sentences);
    longer, its first ``room - tail - 200`` and its last ``tail`` characters (default: a fifth of
    ``room``, at most 2,000) around a ``not_shown`` piece that says how many are left out, ending
    with ``more`` (where to read them). A note of the log's cap is always shown, wherever it falls."""
    notes = list(_NOTE.finditer(text))
    if len(text) <= room:
        head_end = tail_start = len(text)
    else:
        tail = min(2_000, room // 5) if tail is None else tail
        head_end, tail_start = max(0, room - tail - 200), len(text) - tail
        # never inside what a reader sees as one character (an accent, an emoji sequence, a flag)
        head_end = _cluster_start(text, head_end, -1)
        tail_start = _cluster_start(text, tail_start, +1)
    pieces: list[Piece] = []
    hidden = 0
    gap_done = head_end == tail_start

    def gap() -> None:
        nonlocal gap_done
        if not gap_done:
            gap_done = True
            pieces.append(Piece("not_shown", ""))  # its sentence is written once the count is known

    def add_text(start: int, end: int) -> None:
        nonlocal hidden
        if start >= end:
            return
        if start < head_end:
            pieces.append(Piece("text", text[start : min(end, head_end)]))
        if end > head_end and start < tail_start:
            gap()
            hidden += min(end, tail_start) - max(start, head_end)
        if end > tail_start:
            pieces.append(Piece("text", text[max(start, tail_start) : end]))

    at = 0
    for note in notes:
        add_text(at, note.start())
        if note.start() >= head_end:
            gap()  # a note the cut falls before still reads after the gap it is in
        pieces.append(_not_logged(note))
        at = note.end()
    add_text(at, len(text))
    if hidden:
        sentence = f"{hidden:,} of {len(text):,} logged characters not shown here" + (f": {more}" if more else "")
        pieces = [Piece("not_shown", sentence) if p.kind == "not_shown" else p for p in pieces]
    else:
        pieces = [p for p in pieces if p.kind != "not_shown"]
    return ShownText(tuple(pieces), len(text), hidden)
