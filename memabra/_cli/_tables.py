"""The CLI's tables: rich's, except that no word in a cell is ever cut.

rich fits a table to the console by shortening its columns, and a column shorter than a value
ends it with ``…`` or folds it onto the next line: at 80 columns, ``linear-71c5380081`` read
``linear-71…`` and a memory id broke in two, so a person or a script copying it got a wrong id.
Here every column is at least as wide as its longest word (its longest value where it does not
wrap), header included: long text still wraps at spaces, and a table whose words cannot fit is
printed wider than the console (:class:`~memabra._cli._common._Console` does not crop it) rather
than cut.
"""

from __future__ import annotations

from typing import Any

from rich import table as rich_table
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

__all__ = ["Table"]


def _words(cell: Any, *, whole: bool) -> int:
    if isinstance(cell, str):
        cell = Text.from_markup(cell)
    if not isinstance(cell, Text):
        return 0
    lines = cell.plain.splitlines()
    if whole:
        return max((cell_len(line) for line in lines), default=0)
    return max((cell_len(word) for line in lines for word in line.split()), default=0)


class Table(rich_table.Table):
    """:class:`rich.table.Table` whose columns are never narrower than their longest word."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for column in self.columns:
            if column.width is not None:
                continue
            cells = [column.header, *column.cells]
            widest = max((_words(cell, whole=column.no_wrap) for cell in cells), default=0)
            column.min_width = max(column.min_width or 0, widest)
        yield from super().__rich_console__(console, options)
