"""The episode document's payload caps (:mod:`memabra._episode_document`): the log's own
(:mod:`memabra._log_caps`), so a document attached to a ticket stays the size of a newer turn's
log rows, however old its episode.

A turn logged before the log cut payloads may hold a 5 MB tool result, arguments of hundreds of
kilobytes and a 100,000-character answer. The document keeps each such value as the log would
keep it now: its first ``MAX_LOGGED_TEXT - 2,200`` and last 2,000 characters around a note naming
how many characters are not in the document, of how many, with the whole value's UTF-8 size and a
SHA-256 prefix (the log's note says "not logged"; this one says "not in this document", as the log
still holds them). Arguments are cut as the log cuts them (each long string, else their JSON).

Each value cut, by the log when it was logged or by the document now, is named in the document's
``cut`` list: where it is (``steps[1].result``), who cut it (``log``: the rest was never kept;
``document``: the log holds it whole) and how many characters are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memabra._log_caps import ARGUMENTS_CUT_KEY, MAX_LOGGED_ARGUMENT, MAX_LOGGED_TEXT, cut_around, dumps, left_out

__all__ = ["Cuts", "cut_for_document"]


def cut_for_document(text: str, limit: int = MAX_LOGGED_TEXT) -> tuple[str, int]:
    """``text`` as the document keeps it, and how many of its characters are left out (0: whole).
    Never longer than ``limit``."""
    if len(text) <= limit:
        return text, 0
    return cut_around(text, limit, "not in this document", "; the log holds them")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _logged_cut(value: str) -> int | None:
    """How many characters the log left out of ``value``, a text it cut (never past the cap);
    ``None`` for any other text. A note alone does not make a text the log's cut: a 5 MB tool
    result that holds one (a tool that read an exported document, or memabra's own output) was
    logged whole, by a release before the caps, and is cut here like any other."""
    found = left_out(value) if len(value) <= MAX_LOGGED_TEXT else None
    return None if found is None else found[0]


class Cuts:
    """Cuts the values of one document and lists each cut (:attr:`entries`, the document's ``cut``)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def _note(self, path: str, by: str, left: int) -> None:
        self.entries.append({"path": path, "by": by, "left_out": left})

    def text(self, value: str | None, path: str) -> str | None:
        """``value`` (a step's result or error, the answer) within the log's cap."""
        if value is None:
            return None
        logged = _logged_cut(value)
        if logged is not None:
            self._note(path, "log", logged)
            return value
        kept, left = cut_for_document(value)
        if left:
            self._note(path, "document", left)
        return kept

    def arguments(self, arguments: Mapping[str, Any], path: str) -> dict[str, Any]:
        """A tool call's arguments within the log's cap: whole while their JSON is at most
        ``MAX_LOGGED_TEXT`` characters; else each string over ``MAX_LOGGED_ARGUMENT`` cut; else
        ``{ARGUMENTS_CUT_KEY: <their JSON, cut>}`` (as :func:`memabra._log_caps.cut_arguments`)."""
        plain = dict(arguments)
        by_log = sum(found for s in _strings(plain) if (found := _logged_cut(s)) is not None)
        if by_log:
            self._note(path, "log", by_log)
        if len(dumps(plain)) <= MAX_LOGGED_TEXT:
            return plain
        left = 0

        def cut(value: Any) -> Any:
            nonlocal left
            if isinstance(value, str):
                if _logged_cut(value) is not None:  # the log cut it: as logged
                    return value
                kept, n = cut_for_document(value, MAX_LOGGED_ARGUMENT)
                left += n
                return kept
            if isinstance(value, Mapping):
                return {k: cut(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [cut(v) for v in value]
            return value

        shorter = cut(plain)
        if len(dumps(shorter)) > MAX_LOGGED_TEXT:
            kept, left = cut_for_document(dumps(plain))
            shorter = {ARGUMENTS_CUT_KEY: kept}
        if left:
            self._note(path, "document", left)
        return dict(shorter)
