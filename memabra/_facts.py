"""What the user states about themselves, turned into facts worth remembering.

Rules by default (:func:`extract_facts`); a chat model when one is given
(:class:`~memabra._llm_facts.LLMFactExtractor`, which falls back to these rules). Four things
happen on the way in:

* a correction's complaint is cut off, so "I already told you: I'm vegetarian" yields the fact
  "I'm vegetarian", never the complaint's wording (:func:`strip_complaint`);
* a sentence joining independent facts ("I live in Lyon and my dog is called Rex") becomes one
  fact per clause (:func:`split_facts`), so a later change to one of them cannot retire the other;
  "I like salt and pepper" stays whole;
* every fact gets a *subject* when it states something that has one current value — where the
  user lives, their name, their job, their diet, how they take their coffee, a pet's or
  relative's name, "my email / birthday / favourite X is ..." — so a new fact on that subject can
  supersede the old one (:func:`fact_subject`). A passing state or event ("my dog is sick", "my
  sister is visiting next week") has none, so it never retires a standing fact;
* questions and small talk without a first-person statement are skipped, and so are jokes, passing
  states and requests after a fact (:mod:`memabra._message_shapes`: messy chat English).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

from memabra._corrections import normalised, opens_with_complaint, strip_complaint
from memabra._fact_subjects import HEDGE, QUOTED, carries_out, fact_subject
from memabra._message_shapes import (
    CALL_ME,
    JOB,
    REMEMBER_CLAUSE,
    REQUEST_START,
    consequence_split,
    dated_before,
    not_meant,
    passing_state,
    reported,
    trimmed,
)
from memabra._restatement import contradicts

__all__ = [
    "FactExtractor",
    "RuleFactExtractor",
    "extract_facts",
    "fact_subject",
    "fact_subjects",
    "join_facts",
    "split_facts",
    "strip_complaint",
]

# A sentence ends at . ! ? ; but not after a title ("Call me Dr. Smith").
logger = logging.getLogger("memabra")

# Longest fact a memory may hold, in characters (about 500 tokens, a quarter of the default budget):
# a longer text is a document, which would be offered every turn and fit no budget. ``remember``
# refuses it; the rules skip a sentence this long (a pasted page, a log) and read the others.
MAX_MEMORY_CHARS = 2_000
# Longest start of a message the rules read for facts: a 13 MB paste took 9.5 s on the turn's thread.
MAX_FACT_MESSAGE_CHARS = 50_000

_SENTENCE = re.compile(r"(?<=[.!?;])(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bProf\.)\s+|\n+")
_FACT = re.compile(
    r"\b(my|our)\s+[\w' -]{1,40}?\s+(is|are|was|were)\b|\bmy\s+name'?s\b"
    r"|\bi(?:'m| am)\s+(?!not sure|wondering|asking|looking|trying|going to ask|curious)\w"
    r"|\bi\s+(?:really\s+|usually\s+|always\s+|never\s+|don't\s+|do not\s+|no longer\s+|now\s+|just\s+|recently\s+"
    r"|finally\s+|also\s+|still\s+|currently\s+|actually\s+)?"
    r"(live|work|prefer|like|love|hate|dislike|own|have|moved|eat|drink|speak|use|need|want|take|follow)\b"
    r"|\bwe\s+(?:now\s+|just\s+|recently\s+|finally\s+)?(?:live|moved|relocated)\b|"
    + CALL_ME
    + r"|\bremember (that )?|\bplease (always|never)\b|"
    + JOB,
    re.IGNORECASE,
)
_QUESTION_START = re.compile(
    r"^\s*(what|who|where|when|why|how|which|can|could|would|should|is|are|do|does|did)\b", re.I
)
_CLAUSE = re.compile(r"\s*[,;]\s*")
_FIRST_PERSON = re.compile(r"(?:i|i'm|my|our|we)\b", re.I)
# The premise of a question is the user's statement ("since I'm vegan, what can I cook?").
_PREMISE = re.compile(r"^(?:since|because|as|now that|given that|seeing (?:as|that))\s+(?=(?:i|i'm|my|our|we)\b)", re.I)
# Where a sentence may join two facts: "..., and my dog ...", "... but I ...", "..., I ...". A cut
# is only tried where a first-person clause starts, so "I like salt and pepper" is never cut.
_JOIN = re.compile(r"\s*,\s*(?:(?:and|but)\s+)?(?=(?:i|my|our|we)\b)|\s+(?:and|but|&)\s+(?=(?:i|my|our|we)\b)", re.I)
# A clause leaning on the one before ("... and I love it", "... and my wife is too") is no fact of
# its own: it stays joined to what it refers to.
_BACK_REFERENCE = re.compile(
    r"\b(?:it|its|that|this|there|them|those|these|he|she|him|his|her|they|their|one|too|either|same|as well)\b"
    # ...and so does one that stops at its verb ("I'm not vegetarian, my wife is")
    r"|\b(?:is|are|am|was|were|do|does|did|has|have)(?:\s+(?:though|still|anyway|now))?\s*[.!]*\s*$",
    re.I,
)


class FactExtractor(Protocol):
    def __call__(self, text: str) -> list[str]: ...


@lru_cache(maxsize=65_536)
def fact_subjects(text: str) -> frozenset[str]:
    """The subjects of every fact ``text`` states (a memory stored whole may join several)."""
    return frozenset(s for s in map(fact_subject, _parts(text)) if s is not None)


@lru_cache(maxsize=65_536)
def _parts(text: str) -> tuple[str, ...]:
    return tuple(split_facts(text))


def _negates_part(fact: str, text: str) -> bool:
    return any(contradicts(fact, part) for part in _parts(text))


def split_facts(sentence: str) -> list[str]:
    """``sentence`` cut into the independent facts it joins: "My name is Ann and I'm allergic to
    nuts" gives "My name is Ann" and "I'm allergic to nuts". A cut is made only where a
    first-person clause starts and both sides are facts of their own, so "I like salt and pepper",
    "My wife and I live in Lyon" and "I live in Lyon and I love it" stay whole."""
    if reported(sentence):  # "my doctor said I'm vegan and I ...": all of it is the report
        return [sentence]
    pieces: list[str] = []
    seps: list[str] = []
    start = 0
    for m in _JOIN.finditer(sentence):
        pieces.append(sentence[start : m.start()])
        seps.append(m.group())
        start = m.end()
    pieces.append(sentence[start:])
    if len(pieces) == 1:
        return [sentence]
    out: list[str] = []
    lead, dropped = "", False  # text before the first fact ("Hi, I'm Ann") stays with it
    for sep, piece in zip(("", *seps), pieces, strict=True):
        if out and _is_fact(piece) and not _BACK_REFERENCE.search(piece):
            out.append(_capitalised(piece))
        elif out:
            out[-1] += sep + piece
        else:
            lead = lead + sep + piece if lead else piece
            if _is_fact(lead):
                out.append(lead)
            elif passing_state(lead):  # "I'm not kidding, I'm vegan": the state goes
                lead, dropped = "", True
    return out if len(out) > 1 or (dropped and out) else [sentence]


def join_facts(facts: Sequence[str]) -> str:
    """``facts`` as one sentence, the inverse of :func:`split_facts`."""
    rest = [f[0].lower() + f[1:] if _FIRST_PERSON.match(f) and not f.startswith("I") else f for f in facts[1:]]
    return " and ".join([facts[0], *rest])


def _capitalised(clause: str) -> str:
    return clause[0].upper() + clause[1:] if _FIRST_PERSON.match(clause) else clause


def _asks(s: str) -> bool:
    return s.rstrip().endswith("?") or _QUESTION_START.match(s) is not None


def _is_fact(s: str) -> bool:
    s = s.strip()
    if len(s) < 6 or _asks(s) or passing_state(s):
        return False
    # someone else's words, quoted, are not the user's ("my friend said 'I live in Paris'")
    return bool(_FACT.search(QUOTED.sub(" ", s)))


def extract_facts(text: str) -> list[str]:
    """First-person statements of lasting facts in ``text`` ("I am vegetarian", "my dog is Rex").

    Questions and tasks for the assistant ("draft a message telling my team I am away") are
    skipped; a correction's complaint is cut off, and so is a request to remember ("remember that
    I'm vegetarian" keeps "I'm vegetarian"); a sentence joining independent facts gives one fact
    each (:func:`split_facts`); otherwise a sentence is kept whole so the memory reads as the user
    said it.
    """
    facts = []
    size = len(text)
    text = normalised(text[: MAX_FACT_MESSAGE_CHARS + 1])
    sentences = _SENTENCE.split(strip_complaint(text) if opens_with_complaint(text) else text)
    if size > MAX_FACT_MESSAGE_CHARS:  # the last sentence read may be cut: not read either
        sentences = sentences[:-1]
        logger.info(
            "a %d-character message: only its first %d characters are read for facts", size, MAX_FACT_MESSAGE_CHARS
        )
    too_long = 0
    for raw in sentences:
        raw = raw.strip()
        if len(raw) > MAX_MEMORY_CHARS:  # a pasted document's paragraph, a log: no fact of the user's
            too_long += 1
            continue
        if not_meant(raw):  # "yeah right I live on the moon", "..., just kidding"
            continue
        if (len(raw) > 1 and raw[0] == raw[-1] == '"') or raw.count('"') == 1:  # the user's own words, quoted
            raw = raw.strip('"')
        sentence = strip_complaint(raw)
        remembered = REMEMBER_CLAUSE.match(sentence)
        if remembered is not None:
            clause = remembered.group("fact").strip()
            clause = clause.rstrip("?").strip()  # "can you remember that I'm vegetarian?"
            sentence = clause[0].upper() + clause[1:] if clause[:2].lower() != "i'" else "I" + clause[1:]
        elif REQUEST_START.match(sentence) or _asks(sentence):
            # a statement in a clause of its own still counts, after a task ("plan a trip for me, I
            # hate flying") or beside a question ("I'm vegan, what should I cook?"); the task's or
            # the question's own clauses never do
            clauses = [_PREMISE.sub("", c) for c in _CLAUSE.split(sentence)]
            clauses = clauses[1:] if REQUEST_START.match(sentence) else [c for c in clauses if not _asks(c)]
            facts.extend(_facts_of([c[0].upper() + c[1:] for c in clauses if _FIRST_PERSON.match(c)]))
            continue
        # a consequence is no fact ("I'm vegan so no cheese please"), unless first-person itself
        head, consequence = consequence_split(sentence)
        facts.extend(_facts_of([head]))
        if _FIRST_PERSON.match(consequence):
            facts.extend(_facts_of([_capitalised(consequence)]))
    if too_long:
        msg = "%d sentence(s) of a %d-character message are longer than a memory may be (%d): not read for facts"
        logger.info(msg, too_long, size, MAX_MEMORY_CHARS)
    return facts


def _facts_of(sentences: list[str]) -> list[str]:
    return [trimmed(f) for s in sentences if _is_fact(s) for f in split_facts(s)]


class RuleFactExtractor:
    """The default extractor: :func:`extract_facts`; supersession by :func:`fact_subject`."""

    def __call__(self, text: str) -> list[str]:
        return extract_facts(text)

    def superseded(self, fact: str, existing: Sequence[tuple[str, str]]) -> list[str]:
        """Ids among ``existing`` (id, text) that ``fact`` replaces: a subject in common, other
        text; or a fact it negates ("I don't live in Lyon anymore" retires "I live in Lyon"). A memory joining several facts is named when any of them is replaced (the write path
        keeps the others: :meth:`~memabra._memory.MemoryBackend.remember`)."""
        subjects = fact_subjects(fact)
        # "I don't think I'm allergic to nuts" or "my doctor said I don't have diabetes" retires nothing
        negates = HEDGE.search(fact) is None and not reported(fact)
        return [
            mid
            for mid, text in existing
            if text.strip() != fact.strip()
            and not dated_before(fact, text)  # "I moved to Oslo in 2021" leaves "... Rome in 2023"
            and (
                subjects & fact_subjects(text)
                or (negates and _negates_part(fact, text))
                or ("residence" in subjects and carries_out(fact, text))
            )
        ]
