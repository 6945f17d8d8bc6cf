"""A fact and a reason as memories keep them: cleaned, composed, and refused when a memory or a
history entry cannot hold them (before anything is written). Used by every write path
(:mod:`memabra._memory_write`)."""

from __future__ import annotations

import unicodedata

from memabra._errors import InvalidRecordError
from memabra._facts import MAX_MEMORY_CHARS, strip_complaint
from memabra.storage._memory_rows import MAX_REASON_CHARS
from memabra.storage._rows import clean_text

__all__ = ["audit_reason", "clean", "require_user", "too_long"]


def audit_reason(reason: str) -> str:
    """A reason a person gives a change (who and why), as the memory's history keeps it: on one
    line (a pasted ticket's line breaks and tabs read as spaces). Refused, naming the problem and
    before anything is written, when it holds another control character (an escape sequence would
    reach the terminal of whoever reads the history) or is longer than a history entry holds: the
    history used to cut it silently, and with its end went the "(by NAME)" that says who."""
    text = " ".join(reason.split())
    if any(unicodedata.category(ch) == "Cc" for ch in text):
        raise InvalidRecordError("the reason holds a control character; write it as plain text; nothing was changed")
    if len(text) > MAX_REASON_CHARS:
        raise InvalidRecordError(
            f"the reason (with who made the change) is {len(text)} characters; a memory's history keeps at most "
            f"{MAX_REASON_CHARS}: shorten it by {len(text) - MAX_REASON_CHARS} (a ticket number says the rest); "
            "nothing was changed"
        )
    return text


def clean(text: str) -> str:
    """``text`` as a memory's fact: the complaint cut off, trailing punctuation trimmed, NUL bytes
    dropped and lone surrogates replaced, as the SQL log stores any text (PostgreSQL refuses both,
    in a table and in a LangGraph store's JSON alike), and composed (NFC): "Zürich" typed with a
    combining umlaut (NFD, as macOS and some keyboards send it) is the same fact as "Zürich", a
    restatement rather than a new memory retiring the old one. A fact longer than
    :data:`~memabra._facts.MAX_MEMORY_CHARS` is refused: a document is no memory, and one that
    long would be offered every turn and fit no context budget."""
    if not isinstance(text, str):
        raise InvalidRecordError(f"a memory is text, got {type(text).__name__}")
    fact = _cleaned(text)
    if not fact:
        raise InvalidRecordError("a memory needs non-empty text")
    if len(fact) > MAX_MEMORY_CHARS:
        raise InvalidRecordError(
            f"a memory holds at most {MAX_MEMORY_CHARS:,} characters, this one has {len(fact):,}"
            f" (it starts {fact[:60]!r}): store the facts it states, one memory each, not a document"
        )
    return fact


def too_long(text: str) -> bool:
    """Whether :func:`clean` refuses ``text`` for its length: measured as stored, composed (NFC),
    which a few scripts' characters double (Devanagari's precomposed nukta letters)."""
    return len(_cleaned(text)) > MAX_MEMORY_CHARS


def _cleaned(text: str) -> str:
    text = clean_text(text)
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    return strip_complaint(text.strip()).rstrip(".!; ").strip()


def require_user(user_id: str) -> None:
    """Refuse a ``user_id`` memories cannot be scoped by (not a string, or empty), before any read."""
    if not isinstance(user_id, str) or not user_id:
        raise InvalidRecordError(
            f"memories are scoped by user: give a non-empty user_id (a string), got {user_id!r:.80}"
        )
