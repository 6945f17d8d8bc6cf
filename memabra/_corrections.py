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

from memabra._errors import InvalidFeedbackError
from memabra._restatement import is_negated
from memabra._signals import FEEDBACK_KEYS, FeedbackSignals
from memabra._text import content_words, overlap

__all__ = [
    "CorrectionSignal",
    "detect_correction",
    "normalised",
    "opens_with_complaint",
    "strip_complaint",
    "verdict_of",
]

_WRONG = re.compile(
    r"\b(that'?s|that is|this is|you'?re|you are|it'?s|it is)\s+(not\s+(right|correct|true|what i)|wrong|incorrect)"
    r"|\bno,?\s+(that|it|i)\b|\bnot what i (asked|meant|said)\b|\byou (got|have) (it|that) wrong\b"
    r"|\bthat'?s not it\b|\btry again\b|\bredo\b",
    re.IGNORECASE,
)
# An outright complaint that the agent should have known.
# "I already ..." alone is no complaint ("I already ordered, thanks"): it has to be about telling.
_ALREADY_TOLD = re.compile(
    r"\b(i|i'?ve|i have) (already )?(told|said|mentioned) (you|u|that|this|it)\b"
    r"|\bi(?:'?ve| have)? already (told|said|mentioned|explained|gave you)\b|\bi said (?=(?:i|i'm|my)\b)"
    r"|\bhow many times (do|must|should|have) i\b.*\b(tell|say|repeat)\b"
    r"|\byou (should|ought to) (know|remember)\b|\byou forgot\b",
    re.IGNORECASE,
)
# A reminder that may be a mere restatement.
_AS_I_SAID = re.compile(
    r"\bas i (said|mentioned)\b|\blike i said\b|\bremember,? (that )?i\b|\bagain,? my\b|\bremember\s*\?",
    re.IGNORECASE,
)
_WRONG_TOOL = re.compile(
    r"\bwrong (tool|function|api)\b|\b(don'?t|do not|shouldn'?t|should not) (use|call) (that|the|this)\b"
    r"|\buse (the )?\w+ (tool|function) instead\b",
    re.IGNORECASE,
)
# An explicit success score at or above this means the turn worked (S ranges -0.5 .. 1).
_SUCCESS_AT = 0.75


# The complaint around a restated fact: "I already told you: ...", "..., as I said."
_INTERJECTION = (
    r"(?:no+|nope|nah|but|and|plus|well|again|look|remember|ugh+|omg|oh|come\s+on|seriously|sorry|hey|hi|hello|actually"
    r"|ok(?:ay)?|so|yes|yeah|yep|also|anyway|btw|fyi|lol|um+|uh+|hmm+|thanks|thank\s+you|thx|ty|cool|great|nice|sure"
    r"|alright|wow|guess\s+what)"
)
_COMPLAINT_HEAD = re.compile(
    rf"^\s*(?:{_INTERJECTION}\b[,!.]?\s*)*"
    # "told" needs its object ("I told my mom I live in Lyon" is no complaint)
    r"(?:(?:i(?:'ve| have)?\s+(?:already\s+|just\s+)?(?:told\s+(?:you|u|ya|this|that|it)|(?:said|mentioned)"
    r"(?:\s+(?:you|u|this|that|it))?)"
    r"(?:\s+(?:already|before|earlier|twice|many times|last time))*"
    r"|as i (?:said|mentioned|told you)(?:\s+before)?|as (?:already |previously )?mentioned|like i said|you should (?:know|remember)(?: that)?"
    r"|how many times (?:do|must|should|have) i (?:have to |got to |need to )?(?:tell|say|repeat)(?: (?:it|this|that))?"
    r"(?: to)?(?: (?:you|u))?"
    r"|(?:that'?s|that is|you'?re|you are|it'?s|it is)\s+(?:wrong|not right|incorrect|not correct)"
    r"|remember(?:,)?(?= i\b| my\b)|you forgot(?: that)?)"
    r"\s*[:,;.!-]*\s*(?:that\s+)?)+",
    re.IGNORECASE,
)
_COMPLAINT_TAIL = re.compile(
    r"[\s,;(-]*(?:as\s+i(?:'ve|\s+have)?\s+(?:already\s+)?(?:said|mentioned|told\s+(?:you|u))"
    r"|as\s+(?:already\s+)?mentioned|like\s+i\s+(?:said|told\s+(?:you|u))|remember\??|again)"
    r"(?:\s+(?:before|already|earlier|twice))*\s*\)?\s*[.!?]*\s*$",
    re.IGNORECASE,
)
# Words that open a message without belonging to the fact ("No no, I live in Hobart", "Actually my
# name is Annabel"): cut off before a first-person clause.
_LEAD_IN = re.compile(rf"^\s*(?:{_INTERJECTION}\b[\s,!.:;-]*)+(?=(?:i|i'm|i've|my|our)\b)", re.IGNORECASE)

_IM = re.compile(r"\b[iI]m\b")
# "dont", "doesnt", "cant" typed without the apostrophe
_NT = re.compile(r"\b(do|does|did|is|are|was|were|has|have|had|could|would|should|ca|wo)nt\b", re.I)


def normalised(text: str) -> str:
    """``text`` with typographic quotes made plain (phones type a right single quote for the
    apostrophe), a lone "im" read as "I'm" and "dont" as "don't"."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return _NT.sub(r"\1n't", _IM.sub("I'm", text))


def opens_with_complaint(text: str) -> bool:
    return _COMPLAINT_HEAD.match(normalised(text)) is not None


def strip_complaint(sentence: str) -> str:
    """``sentence`` without a correction's complaint: "I already told you: I'm vegetarian."
    gives "I'm vegetarian."; a sentence with no complaint comes back unchanged."""
    sentence = normalised(sentence)
    out = _COMPLAINT_TAIL.sub("", _COMPLAINT_HEAD.sub("", sentence, count=1)).strip()
    out = _LEAD_IN.sub("", out, count=1) or out
    if out and out != sentence.strip() and out[0].islower() and not out.startswith("i'"):
        out = out[0].upper() + out[1:]
    return out


@dataclass(frozen=True, slots=True)
class CorrectionSignal:
    """``kind``: ``wrong_answer``, ``restated_memory``, ``wrong_tool`` or ``repeat``;
    ``memory_id`` names the memory the user restated, when one matched."""

    kind: str
    severity: float
    memory_id: str | None = None


def verdict_of(payloads: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether explicit feedback judged a turn a success (True), a failure (False), or neither.

    Each payload is read as the reward reads it (:attr:`FeedbackSignals.verdict`): a success is an
    S of at least 0.75, the latest verdict wins, and a correction, a wrong-tool verdict or a
    retraction makes the turn a failure. Unknown keys are ignored; a payload the reward could not
    read (a value out of range) gives no verdict."""
    verdict: bool | None = None
    for payload in payloads:
        try:
            signals = FeedbackSignals.parse({k: v for k, v in payload.items() if k in FEEDBACK_KEYS})
        except InvalidFeedbackError:
            continue
        s = signals.verdict
        if s is not None:
            verdict = s >= _SUCCESS_AT
        if signals.corrects:
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
    next_message = normalised(next_message)
    words = content_words(next_message)
    if _WRONG_TOOL.search(next_message):
        signals.append(CorrectionSignal("wrong_tool", 1.0))
    complaint = bool(_ALREADY_TOLD.search(next_message))
    reminder = not complaint and bool(_AS_I_SAID.search(next_message))
    told = complaint or reminder
    if told:
        best_id, best = None, 0.0
        negated = is_negated(next_message)
        for memory_id, text in memories:
            if is_negated(text) != negated:  # "I told you I'm not vegetarian" names no "I'm vegetarian"
                continue
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
