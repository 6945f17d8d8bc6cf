"""The typed feedback record: what one piece of feedback says, parsed and validated once.

A feedback payload arrives as a JSON object (``agent.feedback(eid, rating=4)``, ``memabra feedback
EID '{"rating": 4}'``, the admin form). :meth:`FeedbackSignals.parse` turns it into this record at
that boundary, naming the first unknown key or out-of-range value
(:class:`~memabra._errors.InvalidFeedbackError`); everything after reads typed fields.

=====================  ================================  =======================================
group                  field (payload key)               type and range
=====================  ================================  =======================================
explicit (a person)    ``success``                       number in [-0.5, 1]: S as judged
                       ``correct``                       bool: right (S=1) or wrong (S=0)
                       ``misleading``                    bool: led the user astray (S=-0.5)
                       ``rating``                        integer 1..5
                       ``redo``                          bool: the user asked for a redo
                       ``correction``                    bool or text: the user corrected it
                       ``correction_severity``           number in (0, 1]
                       ``tool_wrong``                    bool or tool name
                       ``retract_memory``                memory id: retired, and a correction
                       ``gold_answer``                   text: the right answer, when known
                       ``comment``                       free text
implicit (observed)    ``repeat``                        bool: the same question came again
                       ``timeout``                       bool: the episode timed out
                       ``used_ids``                      candidate ids the answer used
                       ``useful_ids``                    ids reused instead of asking again
                       ``relevant_ids``                  ids that should have been injected
programmatic (a test)  ``accepted``                      bool: an acceptance check passed
control                ``final``                         bool: finalise the reward now
=====================  ================================  =======================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from memabra._errors import InvalidFeedbackError

__all__ = ["FEEDBACK_KEYS", "ExplicitSignals", "FeedbackSignals", "ImplicitSignals", "ProgrammaticSignals"]

# Longest id a feedback id list may hold: the log's candidate-id column is 200 characters.
_MAX_ID_LENGTH = 200


# Longest rendering of a refused value in an error: a pasted megabyte is named, not echoed.
_SHOWN_CHARACTERS = 200


def _shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut at :data:`_SHOWN_CHARACTERS`; a value nested past
    the interpreter's depth (which ``repr`` cannot write) is named by its type."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"
    return text if len(text) <= _SHOWN_CHARACTERS else f"{text[:_SHOWN_CHARACTERS]}... ({len(text)} characters)"


def _number(key: str, value: Any, low: float, high: float, *, open_low: bool = False) -> float:
    try:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float (a JSON body's 400-digit number)
        ok = False
    if ok and (low < value <= high if open_low else low <= value <= high):
        return float(value)
    bracket = "(" if open_low else "["
    raise InvalidFeedbackError(
        f"feedback {key!r} must be a finite number in {bracket}{low:g}, {high:g}], got {_shown(value)}"
    )


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidFeedbackError(f"feedback {key!r} must be true or false, got {_shown(value)}")
    return value


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidFeedbackError(f"feedback {key!r} must be a text, got {_shown(value)}")
    return value


def _bool_or_text(key: str, value: Any) -> bool | str:
    if not isinstance(value, (bool, str)):
        raise InvalidFeedbackError(f"feedback {key!r} must be a bool or a text, got {_shown(value)}")
    return value


def _rating(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
        raise InvalidFeedbackError(f"feedback {key!r} must be an integer from 1 to 5, got {_shown(value)}")
    return value


def _ids(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InvalidFeedbackError(f"feedback {key!r} must be a list of candidate ids, got {_shown(value)}")
    for v in value:
        if not v or len(v) > _MAX_ID_LENGTH:
            raise InvalidFeedbackError(
                f"feedback {key!r}: candidate ids must have 1 to {_MAX_ID_LENGTH} characters, got {v!r:.80}"
            )
    return tuple(value)


def _severity(key: str, value: Any) -> float:
    return _number(key, value, 0.0, 1.0, open_low=True)


def _success(key: str, value: Any) -> float:
    return _number(key, value, -0.5, 1.0)


@dataclass(frozen=True, slots=True)
class ExplicitSignals:
    """What a person said about the answer. ``None``: not said."""

    success: float | None = None
    correct: bool | None = None
    misleading: bool | None = None
    rating: int | None = None
    redo: bool | None = None
    correction: bool | str | None = None
    correction_severity: float | None = None
    tool_wrong: bool | str | None = None
    retract_memory: str | None = None
    gold_answer: str | None = None
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class ImplicitSignals:
    """What the agent or the runtime observed. ``None``: not observed."""

    repeat: bool | None = None
    timeout: bool | None = None
    used_ids: tuple[str, ...] | None = None
    useful_ids: tuple[str, ...] | None = None
    relevant_ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ProgrammaticSignals:
    """What an automatic check found. ``None``: no check ran."""

    accepted: bool | None = None


_PARSERS: Mapping[str, tuple[str, Any, str]] = {
    # key: (group, parser, what the value must be)
    "success": ("explicit", _success, "number in [-0.5, 1]: S as judged by the caller"),
    "correct": ("explicit", _bool, "bool: the answer was right (S=1) or wrong (S=0)"),
    "misleading": ("explicit", _bool, "bool: the answer led the user the wrong way (S=-0.5)"),
    "rating": ("explicit", _rating, "integer 1..5"),
    "redo": ("explicit", _bool, "bool: the user asked for a redo (S=0)"),
    "correction": ("explicit", _bool_or_text, "bool or text: the user corrected the agent"),
    "correction_severity": ("explicit", _severity, "number in (0, 1]"),
    "tool_wrong": ("explicit", _bool_or_text, "bool or tool name: the user said a tool was the wrong one"),
    "retract_memory": (
        "explicit",
        _text,
        "memory id: a wrong memory, retired if it is the episode user's current one; a correction either way",
    ),
    "gold_answer": ("explicit", _text, "text: the right answer, when known (MemPO grades the decision against it)"),
    "comment": ("explicit", _text, "free text"),
    "repeat": ("implicit", _bool, "bool: the same question came again"),
    "timeout": ("implicit", _bool, "bool: the episode timed out"),
    "used_ids": ("implicit", _ids, "list of candidate ids the answer used"),
    "useful_ids": ("implicit", _ids, "list of candidate ids reused instead of asking the user again"),
    "relevant_ids": ("implicit", _ids, "list of candidate ids that should have been injected"),
    "accepted": ("programmatic", _bool, "bool: a programmatic acceptance check passed"),
    "final": ("control", _bool, "bool: no more feedback will come; finalise the reward now"),
}

FEEDBACK_KEYS: Mapping[str, str] = {key: what for key, (_, _, what) in _PARSERS.items()}
"""Every payload key :meth:`FeedbackSignals.parse` accepts, with the type it must have."""


@dataclass(frozen=True, slots=True)
class FeedbackSignals:
    """One feedback's signals, typed. Build it with :meth:`parse` from a payload, or directly."""

    explicit: ExplicitSignals = field(default_factory=ExplicitSignals)
    implicit: ImplicitSignals = field(default_factory=ImplicitSignals)
    programmatic: ProgrammaticSignals = field(default_factory=ProgrammaticSignals)
    final: bool = False

    @classmethod
    def parse(cls, payload: Mapping[str, Any]) -> FeedbackSignals:
        """Validate a JSON payload; raises :class:`InvalidFeedbackError` naming the first bad key."""
        if not isinstance(payload, Mapping):
            raise InvalidFeedbackError(f"feedback payload must be a JSON object, got {type(payload).__name__}")
        unknown = [key for key in payload if key not in _PARSERS]
        if unknown:
            raise InvalidFeedbackError(
                f"unknown feedback key {', '.join(map(repr, unknown))}; known keys: {', '.join(sorted(_PARSERS))}"
            )
        groups: dict[str, dict[str, Any]] = {"explicit": {}, "implicit": {}, "programmatic": {}, "control": {}}
        for key, value in payload.items():
            group, parser, _ = _PARSERS[key]
            groups[group][key] = parser(key, value)
        return cls(
            ExplicitSignals(**groups["explicit"]),
            ImplicitSignals(**groups["implicit"]),
            ProgrammaticSignals(**groups["programmatic"]),
            bool(groups["control"].get("final", False)),
        )

    def as_payload(self) -> dict[str, Any]:
        """The JSON object this record was parsed from (only the keys that were given)."""
        out: dict[str, Any] = {}
        for group in (self.explicit, self.implicit, self.programmatic):
            for f in fields(group):
                value = getattr(group, f.name)
                if value is not None:
                    out[f.name] = list(value) if isinstance(value, tuple) else value
        if self.final:
            out["final"] = True
        return out

    @property
    def verdict(self) -> float | None:
        """S from this feedback's explicit verdict, ``None`` when it gives none. One payload with
        several verdicts is read in this order: ``success`` as given, ``misleading`` -0.5,
        ``correct`` 1 / 0, ``redo`` 0, ``rating`` r in 1..5 as (r-1)/4. The reward's S and the
        correction detector's "did the previous turn succeed" both read this one rule."""
        e = self.explicit
        if e.success is not None:
            return e.success
        if e.misleading:
            return -0.5
        if e.correct is not None:
            return 1.0 if e.correct else 0.0
        if e.redo:
            return 0.0
        if e.rating is not None:
            return (e.rating - 1) / 4.0
        return None

    @property
    def corrects(self) -> bool:
        """Whether this feedback corrects the agent: an explicit ``correction``, a ``tool_wrong``
        verdict or a request to retract a memory. The reward's C term and the log's ``corrected``
        flag both read this one rule."""
        e = self.explicit
        return bool(e.correction) or bool(e.tool_wrong) or bool(e.retract_memory)
