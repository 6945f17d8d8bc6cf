"""Detecting corrections and repeats in the user's next message (the C term's implicit source).

Rules, not a model: a phrase bank for "that was wrong" / "I already told you" / "wrong tool",
plus two overlap tests — the next message restating a stored memory the agent should have known,
and the next message asking the previous question again.

A soft reminder ("I'm vegetarian, as I said.") is a correction only when the previous turn did
not succeed: not when its explicit verdict was a success, nor when the memory restated was
already in its context. An outright complaint ("I already told you ...") always is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memabra._text import content_words, overlap

__all__ = ["CorrectionSignal", "detect_correction", "verdict_of"]

_WRONG = re.compile(
    r"\b(that'?s|that is|this is|you'?re|you are|it'?s|it is)\s+(not\s+(right|correct|true|what i)|wrong|incorrect)"
    r"|\bno,?\s+(that|it|i)\b|\bnot what i (asked|meant|said)\b|\byou (got|have) (it|that) wrong\b"
    r"|\bthat'?s not it\b|\btry again\b|\bredo\b",
    re.IGNORECASE,
)
# An outright complaint that the agent should have known.
_ALREADY_TOLD = re.compile(
    r"\b(i|i'?ve) (already )?(told|said|mentioned) (you|that|this)\b"
    r"|\byou (should|ought to) (know|remember)\b|\bi already\b|\byou forgot\b",
    re.IGNORECASE,
)
# A reminder that may be a mere restatement.
_AS_I_SAID = re.compile(
    r"\bas i (said|mentioned)\b|\blike i said\b|\bremember,? (that )?i\b|\bagain,? my\b", re.IGNORECASE
)
_WRONG_TOOL = re.compile(
    r"\bwrong (tool|function|api)\b|\b(don'?t|do not|shouldn'?t|should not) (use|call) (that|the|this)\b"
    r"|\buse (the )?\w+ (tool|function) instead\b",
    re.IGNORECASE,
)
# An explicit success score at or above this means the turn worked (S ranges -0.5 .. 1).
_SUCCESS_AT = 0.75


@dataclass(frozen=True, slots=True)
class CorrectionSignal:
    """``kind``: ``wrong_answer``, ``restated_memory``, ``wrong_tool`` or ``repeat``;
    ``memory_id`` names the memory the user restated, when one matched."""

    kind: str
    severity: float
    memory_id: str | None = None


def verdict_of(payloads: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether explicit feedback judged a turn a success (True), a failure (False), or neither."""
    verdict: bool | None = None
    for p in payloads:
        if "success" in p and isinstance(p["success"], (int, float)):
            verdict = float(p["success"]) >= _SUCCESS_AT
        if isinstance(p.get("correct"), bool):
            verdict = bool(p["correct"])
        if isinstance(p.get("rating"), int):
            verdict = int(p["rating"]) >= 4
        if p.get("misleading") is True or p.get("redo") is True or p.get("correction"):
            verdict = False
    return verdict


def detect_correction(
    previous_query: str,
    next_message: str,
    memories: Iterable[tuple[str, str]] = (),
    *,
    injected_ids: Iterable[str] = (),
    previous_succeeded: bool | None = None,
    repeat_threshold: float = 0.8,
    restate_threshold: float = 0.6,
) -> list[CorrectionSignal]:
    """Signals that ``next_message`` corrects the previous turn.

    ``memories`` are ``(id, text)`` pairs the agent could have injected; a next message that
    says "I told you" (or similar) and overlaps one of them marks that memory as missed.
    ``injected_ids`` are the memories the previous turn had in its context and
    ``previous_succeeded`` its explicit verdict, if any: a soft reminder ("as I said") after a turn
    that succeeded, or that had the restated memory, is not a correction.
    """
    signals: list[CorrectionSignal] = []
    words = content_words(next_message)
    if _WRONG_TOOL.search(next_message):
        signals.append(CorrectionSignal("wrong_tool", 1.0))
    complaint = bool(_ALREADY_TOLD.search(next_message))
    reminder = not complaint and bool(_AS_I_SAID.search(next_message))
    told = complaint or reminder
    if told:
        best_id, best = None, 0.0
        for memory_id, text in memories:
            score = overlap(words, content_words(text))
            if score > best:
                best_id, best = memory_id, score
        matched = best_id if best >= restate_threshold else None
        had_it = matched is not None and matched in set(injected_ids)
        if complaint or not (previous_succeeded is True or had_it):
            signals.append(CorrectionSignal("restated_memory", 1.0, matched))
    if _WRONG.search(next_message) and not told:
        signals.append(CorrectionSignal("wrong_answer", 0.5))
    if overlap(words, content_words(previous_query)) >= repeat_threshold and len(words) >= 2:
        signals.append(CorrectionSignal("repeat", 0.5))
    return signals
