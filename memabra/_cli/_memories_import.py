"""``memabra memories import``: a file of facts, read as a stream twice, never whole.

The first pass checks every line (an error names it, ``FILE:LINE``) and writes nothing; the second
reads the file again a chunk at a time and imports each user's facts of the chunk in file order
(``remember_many``), so the import holds a chunk of the file, not the file (the first pass keeps
the set of user ids, for the count it reports). A fact of a user whose lines go on in the next
chunk is imported before that chunk's: each user's facts are still applied in file order, and an
import killed at any point and run again skips what it wrote (restatements of known texts).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from memabra._cli._common import STDOUT, console, fail, open_output, run_guarded

if TYPE_CHECKING:
    from memabra._sql_memory import SQLMemory

__all__ = ["CHUNK_CHARS", "CHUNK_FACTS", "CheckedFile", "check_file", "import_checked"]

_JSON_ONLY_SUFFIXES = (".jsonl", ".ndjson", ".json")
_USER_FIELDS = ("user_id", "user")
# "text" is memabra's, "memory" mem0's export, "content" LangMem's (a string or {"content": ...})
_TEXT_FIELDS = ("text", "memory", "content")
_BOM = b"\xef\xbb\xbf"  # a byte-order mark some editors add

CHUNK_FACTS = 10_000
"""Facts the import holds at a time (fewer when their text passes ``CHUNK_CHARS``)."""
CHUNK_CHARS = 4_000_000
PROGRESS_EVERY = 10_000
"""A progress line each time this many more facts are done, in a file of more."""


class _BadLine(Exception):
    """A line that cannot be imported: ``FILE:LINE: what is wrong``."""


@dataclass(frozen=True, slots=True)
class CheckedFile:
    """A file of facts whose every line was checked: how many facts, of how many users."""

    path: Path
    user: str | None
    facts: int
    users: int
    only_user: str | None
    stamp: tuple[int, int]


def _stamp(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_size, found.st_mtime_ns


def _changed(path: Path, stamp: tuple[int, int]) -> bool:
    """Whether ``path`` is no longer the file stamped ``stamp`` (gone, or another version)."""
    try:
        return _stamp(path) != stamp
    except OSError:
        return True


def _line_text(value: dict[str, object]) -> object:
    for field in _TEXT_FIELDS:
        found = value.get(field)
        if isinstance(found, dict) and field == "content":
            found = found.get("content")
        if found is not None:
            return found
    return None


def _facts(path: Path, user: str | None) -> Iterator[tuple[str, str]]:
    """``(user, cleaned fact)`` of each line of ``path`` in file order, a line at a time; the
    first bad line raises :class:`_BadLine`. A JSON line may name its user (``user_id``);
    ``user`` is the user of the lines that do not."""
    from memabra._errors import InvalidRecordError
    from memabra._memory_write import clean
    from memabra._records import MAX_ID_LENGTH

    json_only = path.suffix.lower() in _JSON_ONLY_SUFFIXES
    with path.open("rb") as lines:
        for n, data in enumerate(lines, start=1):  # b"\n" alone ends a line: a line number an editor shows
            where = f"{path}:{n}"
            try:
                line = (data.removeprefix(_BOM) if n == 1 else data).decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                raise _BadLine(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8") from None
            if not line:
                continue
            owner, text = user, line
            if line.startswith("{") or json_only:
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise _BadLine(f"{where}: not valid JSON ({exc.msg})") from None
                if not isinstance(value, dict):
                    raise _BadLine(f"{where}: a JSON line must be an object with a 'text' field")
                found = _line_text(value)
                if not isinstance(found, str) or not found.strip():
                    raise _BadLine(f"{where}: a JSON line needs a non-empty 'text' string (or mem0's 'memory')")
                text = found
                named = next((value[f] for f in _USER_FIELDS if value.get(f) is not None), None)
                if named is not None:
                    if not isinstance(named, str) or not named.strip():
                        raise _BadLine(f"{where}: 'user_id' must be a non-empty string, got {named!r}")
                    if user is not None and named != user:
                        raise _BadLine(f"{where}: the line is user {named!r}'s but --user is {user!r}")
                    owner = named
            if owner is None:
                raise _BadLine(f"{where}: no user: give --user, or a 'user_id' field on every JSON line")
            if "\x00" in text or "\x00" in owner:
                raise _BadLine(f"{where}: a NUL character (U+0000) in the text or user; remove it")
            if len(owner) > MAX_ID_LENGTH:  # refused by the first write of that user, after the users before it
                raise _BadLine(f"{where}: a user id holds at most {MAX_ID_LENGTH} characters, got {len(owner)}")
            try:
                fact = clean(text)
            except InvalidRecordError as exc:
                raise _BadLine(f"{where}: {exc} (the line is {line[:60]!r})") from None
            yield owner, fact


def check_file(path: Path, user: str | None) -> CheckedFile:
    """Every line of ``path`` checked, as a stream, before anything is written: a bad line is a
    one-line error naming it (``FILE:LINE``), ``nothing was imported``, exit 1."""
    if not path.is_file():
        fail(f"no such file: {path}")
    stamp = _stamp(path)
    facts, users = 0, set()
    try:
        for owner, _ in _facts(path, user):
            facts += 1
            users.add(owner)
    except _BadLine as bad:
        fail(f"{bad}; nothing was imported")
    except OSError as exc:
        fail(f"could not read {path}: {exc.strerror or exc}; nothing was imported")
    if _stamp(path) != stamp:
        fail(f"{path} changed while it was checked; nothing was imported: run the import again once it is written")
    only = next(iter(users)) if len(users) == 1 else None
    return CheckedFile(path, user, facts, len(users), only, stamp)


def _chunks(checked: CheckedFile) -> Iterator[dict[str, list[str]]]:
    """The file's facts again, a chunk at a time: each user's facts of the chunk in file order."""
    chunk: dict[str, list[str]] = {}
    size = chars = 0
    for owner, fact in _facts(checked.path, checked.user):
        chunk.setdefault(owner, []).append(fact)
        size, chars = size + 1, chars + len(fact)
        if size >= CHUNK_FACTS or chars >= CHUNK_CHARS:
            yield chunk
            chunk, size, chars = {}, 0, 0
    if chunk:
        yield chunk


@contextmanager
def _json_list(path: Path | None) -> Iterator[Callable[[Iterable[dict[str, str]]], None]]:
    """Write a JSON list to ``path`` an item at a time (what ``write_json`` writes for the whole
    list): the imported facts are never all held at once."""
    if path is None:
        yield lambda rows: None
        return
    with open_output(path) as out:
        first = True

        def emit(rows: Iterable[dict[str, str]]) -> None:
            nonlocal first
            for row in rows:
                item = textwrap.indent(json.dumps(row, indent=2, allow_nan=False), "  ")
                out.write(("[\n" if first else ",\n") + item)
                first = False

        yield emit
        out.write("[]\n" if first else "\n]\n")
    if path != STDOUT:
        console.print(Text(f"wrote {path}"), highlight=False)


def import_checked(memory: SQLMemory, checked: CheckedFile, json_out: Path | None) -> None:
    """Import the facts of a checked file, chunk by chunk, each user's in file order."""
    path, total = checked.path, checked.facts
    done = imported = said = 0
    with _json_list(json_out) as emit:
        if _stamp(path) != checked.stamp:
            fail(f"{path} changed since it was checked; nothing was imported: run the import again")
        try:
            for chunk in _chunks(checked):
                for owner, texts in chunk.items():
                    items = run_guarded(memory.remember_many, owner, texts)
                    emit({"user": owner, "id": i.id, "text": i.text} for i in items)
                    done, imported = done + len(texts), imported + len(items)
                    if total > PROGRESS_EVERY and done // PROGRESS_EVERY > said // PROGRESS_EVERY:
                        console.print(f"{done} of {total} facts done, {imported} imported", highlight=False)
                        said = done
        except _BadLine as bad:
            fail(f"{bad}: {path} changed during the import ({imported} facts were imported); run it again")
        # as many facts but another version of the file (rewritten, same size or not): what was
        # imported is of neither version alone
        if done != total or _changed(path, checked.stamp):
            fail(f"{path} changed during the import ({imported} facts were imported); run it again")
    whom = checked.only_user if checked.users == 1 else f"{checked.users} users"
    console.print(f"imported {imported} of {total} facts for {whom}", markup=False, highlight=False)
