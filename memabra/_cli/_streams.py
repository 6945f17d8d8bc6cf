"""Standard output and error as a script's environment leaves them: an ASCII-only locale
(``LANG=C`` without Python's UTF-8 coercion, ``PYTHONIOENCODING=ascii``) and a reader that stops
early (``| head``).

memabra's tables and notes use a few typographic characters (``…``, ``—``, ``→``, ``×``, ``✓``) and
print user text (memories, queries) as it was stored; written to a stream that cannot encode them,
Python raises ``UnicodeEncodeError`` half way through a table. :func:`make_streams_encodable` has
such a stream write them as ASCII instead: the typographic ones as their usual ASCII spelling
(``...``, ``--``, ``->``, ``x``, ``ok``), anything else as a backslash escape (``caf\\xe9``), so no
character is silently lost. A UTF-8 stream is left alone.
"""

from __future__ import annotations

import codecs
import io
import sys

__all__ = ["BROKEN_PIPE_EXIT", "ERRORS", "encodes_everything", "make_streams_encodable"]

ERRORS = "memabra.ascii"
"""The codec error handler :func:`make_streams_encodable` gives a stream that cannot encode everything."""

BROKEN_PIPE_EXIT = 141
"""The exit status of a command whose reader closed standard output early (``| head``): 128 + SIGPIPE,
what a shell reports for a program the signal ended, so a script tells it from a failure (1)."""

_ASCII = {
    "\u2026": "...",  # …
    "\u2014": "--",  # —
    "\u2013": "-",  # –
    "\u00d7": "x",  # ×
    "\u2192": "->",  # →
    "\u2190": "<-",  # ←
    "\u00b7": "-",  # ·
    "\u2713": "ok",  # ✓
    "\u2714": "ok",  # ✔
    "\u2717": "x",  # ✗
    "\u2264": "<=",  # ≤
    "\u2265": ">=",  # ≥
    "\u00b1": "+/-",  # ±
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2022": "*",  # •
    "\u00a0": " ",  # no-break space
}


def _as_ascii(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    spelled = "".join(_ASCII.get(ch) or ch.encode("ascii", "backslashreplace").decode("ascii") for ch in text)
    return spelled, exc.end


codecs.register_error(ERRORS, _as_ascii)


def encodes_everything(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name.startswith(("utf-8", "utf-16", "utf-32"))
    except LookupError:
        return False


def make_streams_encodable() -> None:
    """Have standard output and error write what their encoding cannot hold as ASCII (see the
    module's text) instead of raising; a UTF-8 stream, or one that is not a text file (a test's
    capture), is left as it is."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not isinstance(stream, io.TextIOWrapper) or not encoding or encodes_everything(encoding):
            continue
        stream.reconfigure(errors=ERRORS)
