"""Detecting corrections and repeats in the user's next message (the C term's implicit source).

Rules, not a model: a phrase bank for "that was wrong" / "I already told you" / "wrong tool",
plus two overlap tests — the next message restating a stored memory the agent should have known,
and the next message asking the previous question again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memabra._text import content_words, overlap

__all__ = ["CorrectionSignal", "detect_correction"]

_WRONG = re.compile(
    r"\b(that'?s|that is|this is|you'?re|you are|it'?s|it is)\s+(not\s+(right|correct|true|what i)|wrong|incorrect)"
    r"|\bno,?\s+(that|it|i)\b|\bnot what i (asked|meant|said)\b|\byou (got|have) (it|that) wrong\b"
    r"|\bthat'?s not it\b|\btry again\b|\bredo\b",
    re.IGNORECASE,
)
_ALREADY_TOLD = re.compile(
    r"\b(i|i'?ve) (already )?(told|said|mentioned) (you|that|this)\b|\bas i (said|mentioned)\b"
    r"|\byou (should|ought to) (know|remember)\b|\bremember,? (that )?i\b|\bi already\b|\bagain,? my\b",
    re.IGNORECASE,
)
_WRONG_TOOL = re.compile(
    r"\bwrong (tool|function|api)\b|\b(don'?t|do not|shouldn'?t|should not) (use|call) (that|the|this)\b"
    r"|\buse (the )?\w+ (tool|function) instead\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class CorrectionSignal:
    """``kind``: ``wrong_answer``, ``restated_memory``, ``wrong_tool`` or ``repeat``;
    ``memory_id`` names the memory the user restated, when one matched."""

    kind: str
    severity: float
    memory_id: str | None = None


def detect_correction(
    previous_query: str,
    next_message: str,
    memories: Iterable[tuple[str, str]] = (),
    *,
    repeat_threshold: float = 0.8,
    restate_threshold: float = 0.6,
) -> list[CorrectionSignal]:
    """Signals that ``next_message`` corrects the previous turn.

    ``memories`` are ``(id, text)`` pairs the agent could have injected; a next message that
    says "I told you" (or similar) and overlaps one of them marks that memory as missed.
    """
    signals: list[CorrectionSignal] = []
    words = content_words(next_message)
    if _WRONG_TOOL.search(next_message):
        signals.append(CorrectionSignal("wrong_tool", 1.0))
    told = bool(_ALREADY_TOLD.search(next_message))
    if told:
        best_id, best = None, 0.0
        for memory_id, text in memories:
            score = overlap(words, content_words(text))
            if score > best:
                best_id, best = memory_id, score
        signals.append(CorrectionSignal("restated_memory", 1.0, best_id if best >= restate_threshold else None))
    if _WRONG.search(next_message) and not told:
        signals.append(CorrectionSignal("wrong_answer", 0.5))
    if overlap(words, content_words(previous_query)) >= repeat_threshold and len(words) >= 2:
        signals.append(CorrectionSignal("repeat", 0.5))
    return signals
