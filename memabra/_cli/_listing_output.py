"""Listings too long to hold at once (``episodes list --all``, ``memories list --json``): JSON
written item by item, byte for byte what ``write_json`` writes for the whole list, and tables
printed a batch of rows at a time."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import Any, TypeVar

from rich.text import Text

from memabra._cli._common import STDOUT, console, jsonable, open_output
from memabra._cli._tables import Table

__all__ = ["TABLE_BATCH", "batches", "print_in_batches", "write_json_list"]

T = TypeVar("T")

TABLE_BATCH = 500
"""Rows per table when a listing is printed whole: a table is laid out once its rows are all in."""


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def write_json_list(
    path: Path, items: Iterable[Any], *, key: str | None = None, after: dict[str, Any] | None = None
) -> int:
    """Write ``items`` as a JSON list to ``path`` (``-``: standard output), one at a time, exactly
    as ``write_json`` writes the whole value (``indent=2``): the list itself, or with ``key`` an
    object holding it under ``key`` followed by the entries of ``after``. Returns how many."""
    depth = 2 if key is not None else 1
    pad = "  " * depth
    n = 0
    # the first item is read before the output opens: a listing refused at its first read (an
    # unknown --snapshot, a blank --user, a database it cannot reach) writes nothing, where it
    # left `{"episodes": [` on standard output, half a document for the script's jq to choke on
    pending = iter(items)
    items = chain(list(islice(pending, 1)), pending)
    with open_output(path) as out:
        out.write("{\n" + f"  {json.dumps(key)}: [" if key is not None else "[")
        for item in items:
            text = json.dumps(jsonable(item), indent=2, allow_nan=False)
            out.write(("," if n else "") + "\n" + "\n".join(pad + line for line in text.split("\n")))
            n += 1
        out.write(("\n" + "  " * (depth - 1) + "]") if n else "]")
        if key is not None:
            for name, value in (after or {}).items():
                body = json.dumps(jsonable(value), indent=2, allow_nan=False).replace("\n", "\n  ")
                out.write(f",\n  {json.dumps(name)}: {body}")
            out.write("\n}")
        out.write("\n")
    if path != STDOUT:
        console.print(Text(f"wrote {path}"), highlight=False)
    return n


def print_in_batches(rows: Iterable[T], make_table: Callable[[list[T], bool], Table]) -> int:
    """Print ``rows`` as tables of :data:`TABLE_BATCH` rows (``make_table(batch, first)``: the
    first carries the title and the header); returns how many rows."""
    n = 0
    for chunk in batches(rows, TABLE_BATCH):
        console.print(make_table(chunk, n == 0))
        n += len(chunk)
    return n
