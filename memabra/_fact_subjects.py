"""The subject of a fact: what it states the one current value of (where the user lives, their
name, job, diet, a pet's name, "my email is ..."), so that a newer fact on it supersedes the older.
Split from :mod:`memabra._facts` (extraction), which re-exports :func:`fact_subject`.
"""

from __future__ import annotations

import re

from memabra._corrections import normalised
from memabra._message_shapes import CALL_ME, JOB, JOB_CHANGED, TEMPORARY, reported, self_named
from memabra._restatement import is_negated

__all__ = ["HEDGE", "MOVE_PLAN", "QUOTED", "carries_out", "fact_subject"]

# Someone else's words: a first-person clause inside quotes is not the user's ("my friend said 'I
# live in Paris'").
QUOTED = re.compile(r'"[^"]+"|(?<!\w)\'.+?\'(?!\w)')
# A statement hedged ("I think I'm allergic to nuts", "maybe I'm vegetarian") is kept as said, but
# states no current value to replace another with.
HEDGE = re.compile(
    r"\b(?:i\s+(?:don'?t\s+|do\s+not\s+)?(?:think|guess|believe|suppose|reckon)|maybe|perhaps|probably|possibly|might|not\s+sure|unsure"
    r"|not\s+certain)\b",
    re.I,
)

# After "my name is" or "my X is": "... spelled with two n's", "... not Anna" say something about
# the value, not a new one.
_A_VALUE = r"(?!\s+(?:not|never|spelled|spelt|pronounced|written|short for|hard|difficult|easy|unusual|common|too)\b)"

MOVE_PLAN = "move plan"
"""The subject of a plan to move ("I'm moving to Berlin next month"): a newer plan replaces it, and
so does the move it plans (a ``residence`` fact naming its destination); a plan replaces no
residence (the user lives where they did until they move)."""
_MOVE_PLAN = re.compile(
    r"\b(?:i|we)(?:'m| am|'re| are)\s+(?:(?:soon|about|planning|going)\s+(?:to\s+)?)?(?:moving|relocating|move|relocate)\s+to\b",
    re.I,
)
# where a plan goes: the words after "moving to", up to a time or the clause's end
_DESTINATION = re.compile(
    r"\s*(?P<place>.+?)(?=\s+(?:next|in|on|this|soon|by|at|after|before|around|later|once|when)\b|\s*[,.;!?]|\s*$)",
    re.I,
)

# Subjects with a single current value. Order matters: the first match names the subject.
_SUBJECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "residence",
        re.compile(
            r"\b(?:i|we)\s+(?:now\s+|currently\s+)?(?:live|am living|reside)\s+in\b"
            r"|\b(?:i|we)(?:'ve| have)?\s+(?:just\s+)?(?:moved|relocated)\s+to\b"
            r"|\bi(?:'m| am)\s+(?:now\s+)?(?:based|living)\s+in\b|\bmy (?:home|city|address) is\b",
            re.I,
        ),
    ),
    (
        "name",
        re.compile(
            r"\bmy name(?: is|'?s)\b" + _A_VALUE + "|" + CALL_ME + r"|\bi(?:'m| am) called\b",
            re.I,
        ),
    ),
    (
        "work",
        re.compile(
            r"\bi\s+(?:now\s+)?work\s+(?:as|at|for)\b(?!\s+home\b)|\bmy job is\b|\bi(?:'m| am) employed\b|"
            + JOB
            + "|"
            + JOB_CHANGED,
            re.I,
        ),
    ),
    (
        "diet",
        re.compile(
            # the user's own diet only: "my wife's diet is vegan" or "my wife is on a keto diet" is hers
            r"\bmy diet\b|\bi(?:'m| am)?\s+(?:(?:now|currently|strictly|still|mostly|always|usually)\s+)?"
            r"(?:follow|on|eat|keep|have|do|stick\s+to)\b[^,;.]{0,30}?\bdiet\b"
            r"|\bi(?:'m| am)\s+(?:a\s+)?(?:vegetarian|vegan|pescatarian|keto|halal|kosher|omnivore)\b|\bi eat meat\b",
            re.I,
        ),
    ),
    ("coffee", re.compile(r"\b(?:take|have|drink|like) my coffee\b|\bmy (?:usual )?coffee(?: order)? is\b", re.I)),
    ("units", re.compile(r"\b(?:metric|imperial)\s+units\b", re.I)),
    # "I'm 34" is "my age is 34"
    (
        "my age",
        re.compile(r"\bi(?:'m| am)\s+\d{1,3}(?:\s+(?:years?|yrs?)(?:\s+old)?)?(?=\s*(?:$|[,.!;]|and\b|now\b))", re.I),
    ),
)
# "my dog is called Rex" is about the dog's name: the dog may be sick, old or a labrador as well.
_CALLED = re.compile(r"\b(my|our)\s+([a-z']+(?:\s+[a-z']+)?)\s+(?:is|are)\s+(?:called|named)\b", re.I)
_MY_THING = re.compile(r"\b(my|our)\s+((?:favou?rite\s+)?[a-z']+(?:\s+[a-z']+)?)\s+(?:is|are)\b" + _A_VALUE, re.I)
# What "my X is ..." names that has one current value. Anything else ("my dog is sick", "my sister
# is a doctor", "my car is red") may hold alongside other facts about X, so it supersedes nothing.
_SINGLE_VALUED = frozenset(
    {
        "address",
        "age",
        "anniversary",
        "birthday",
        "email",
        "employer",
        "handle",
        "language",
        "name",
        "nationality",
        "number",
        "occupation",
        "postcode",
        "profession",
        "pronouns",
        "role",
        "timezone",
        "title",
        "username",
        "zone",
        "zip",
    }
)


def fact_subject(text: str) -> str | None:
    """The single-valued subject a fact is about ("residence", "name", "work", "diet", "coffee",
    "units", "my dog's name", "my email", "my favourite colour", ...), or None when facts like it
    may coexist (allergies, likes, "my sister is a doctor") or it states a passing state or event
    ("my dog is sick", "I'm living in Paris this summer"), or it is hedged ("maybe I'm vegan") or
    negated ("I'm not vegetarian now": it retires the fact it negates, see :func:`contradicts`)."""
    text = QUOTED.sub(" ", normalised(text))
    if HEDGE.search(text) or is_negated(text) or reported(text):
        return None
    if _MOVE_PLAN.search(text):  # dated by nature ("next month"): the plan is its own subject
        return MOVE_PLAN
    if TEMPORARY.search(text):
        return None
    for subject, pattern in _SUBJECTS:
        if pattern.search(text):
            return subject
    if self_named(text):  # after the subjects, so "I'm Vegan" stays a diet and "I'm Retired" a job
        return "name"
    called = _CALLED.search(text)
    if called is not None:
        return f"{called.group(1).lower()} {called.group(2).lower()}'s name"
    mine = _MY_THING.search(text)
    if mine is None:
        return None
    thing = " ".join(mine.group(2).lower().replace("favorite", "favourite").split())
    if thing.startswith("favourite ") or thing.split()[-1] in _SINGLE_VALUED:
        return f"{mine.group(1).lower()} {thing}"
    return None


def carries_out(fact: str, plan: str) -> bool:
    """Whether ``fact`` (where the user lives) is the move ``plan`` planned: it names the plan's
    destination ("I live in Berlin now" carries out "I'm moving to Berlin next month")."""
    planned = _MOVE_PLAN.search(plan)
    place = _DESTINATION.match(plan, planned.end()) if planned is not None else None
    if place is None:
        return False
    return set(place.group("place").lower().split()) <= set(re.findall(r"[\w']+", fact.lower()))
