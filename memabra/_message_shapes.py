"""Shapes of a user's message that decide whether a first-person clause is a fact to keep.

Rules the extractor (:mod:`memabra._facts`) applies to messy chat English, each a shape of the
sentence rather than a list of sentences:

* a task for the assistant is no fact (:data:`REQUEST_START`), unless it asks for something to be
  remembered (:data:`REMEMBER_CLAUSE`); "call me Annie" is a name, "call me back" a task;

* a joke or sarcasm ("yeah right I live on the moon", "..., just kidding", an eye-roll emoji) is
  not meant: :func:`not_meant`;
* a passing state with nothing else in the clause ("I'm tired", "I'm good, thanks", "I'm back!")
  is no lasting fact: :func:`passing_state`;
* a first-person clause that someone else reports ("my doctor said I live in Lyon", "my mom thinks
  I'm vegan") is theirs to say: it is stored as said, attributed, and states no value of the
  user's: :func:`reported`;
* a consequence after "so" ("I'm vegan so no cheese please") is cut off the fact it follows:
  :func:`consequence_split`; "so" as an intensifier ("I'm so hungry") is not a cut;
* emoji and "lol" around a fact are trimmed off it: :func:`trimmed`;
* "I'm a nurse" is the user's job as "I work as a nurse" is: :data:`JOB`;
* "I'm Annie" is the user's name as "call me Annie" is, unless the word is a nationality, a faith,
  a state or another word people capitalise ("I'm Italian", "I'm Jewish", "I'm OK"), and a
  capitalised run that goes on in lowercase ("I'm New York based") is none: :func:`self_named`;
* a fact dated to an earlier year than a stored fact does not replace it ("I moved to Oslo in 2021"
  leaves "I moved to Rome in 2023"): :func:`dated_before`.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "JOB",
    "JOB_CHANGED",
    "CALL_ME",
    "NOT_A_NAME",
    "REMEMBER_CLAUSE",
    "REQUEST_START",
    "TEMPORARY",
    "consequence_split",
    "dated_before",
    "not_meant",
    "passing_state",
    "reported",
    "self_named",
    "trimmed",
]

# What follows "call me" that is not a name: "call me back / tomorrow" is a task.
NOT_A_NAME = (
    r"(?!\s+(?:back|later|when|if|at|on|after|before|anytime|any\s+time|tomorrow|tonight|today|now|soon|asap"
    r"|sometime|again|please|maybe|once|around|in|about|whenever)\b)"
)
# How the user gives a name: "call me Annie", "everyone calls me Annie", "my friends call me Annie".
CALL_ME = r"\b(?:call|(?:everyone|everybody|people|they|(?:my\s+)?friends)\s+calls?)\s+me\b" + NOT_A_NAME
# A passing state or event: it has no single current value to replace, and replaces none.
TEMPORARY = re.compile(
    r"\b(?:today|tonight|tomorrow|yesterday|(?:right|just) now|at the moment|for now|for the time being"
    r"|temporarily|until|this (?:morning|afternoon|evening|week|weekend|month|year|summer|winter|spring|autumn|fall)"
    r"|next (?:week|weekend|month|year|summer|winter|spring|autumn|fall|time"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
    r"|for (?:a|the|two|three|few|a few|a couple of) (?:few )?(?:days?|weeks?|months?|while|nights?))\b",
    re.I,
)

# A task for the assistant ("Draft a message telling my team I am away", "Tell them I live in
# Paris") states no lasting fact of its own: stored whole it would be offered as a memory in every
# later turn, and its first-person clause is as often a passing state ("I am away") as a fact
REQUEST_START = re.compile(
    r"^\s*(?:please\s+|kindly\s+)?(?:draft|write|compose|send|email|text|message|tell|ask|book|reserve|"
    r"order|buy|find|search|look\s+up|check|translate|convert|set|schedule|plan|make|create|prepare|"
    r"suggest|recommend|give|show|list|summari[sz]e|explain|help|let\s+me\s+know|reply|answer|call(?!\s+me\b"
    + NOT_A_NAME
    + r"))\b"
    # ...also in the first person: "I need you to book a flight", "I need help with my email"
    r"|^\s*i\s+(?:need|want|would\s+like|'d\s+like)\s+(?:you|u)\s+to\b|^\s*i\s+need\s+(?:some\s+)?help\b"
    r"|^\s*i\s+have\s+(?:a|another|one\s+more)\s+question\b",
    re.I,
)
# A request to remember is no task: its clause is the fact ("remember that I'm vegetarian"); so is
# a question about telling ("did I tell you I moved to Paris?", "did you know I'm vegan?").
REMEMBER_CLAUSE = re.compile(
    r"^\s*(?:(?:(?:can|could|would|will)\s+(?:you|u)\s+(?:please\s+)?|i\s+(?:need|want|would\s+like|'d\s+like)"
    r"\s+(?:you|u)\s+to\s+|please\s+)?(?:remember|note|keep\s+in\s+mind|don't\s+forget|do\s+not\s+forget|remind\s+me)"
    r"|(?:did|have)\s+i\s+(?:ever\s+)?(?:tell|told|mention|mentioned)\s+(?:you|u)|(?:did|do)\s+(?:you|u)\s+know)"
    r"(?:\s+that)?[\s:,]+(?P<fact>.+)$",
    re.I,
)


# Sarcasm and jokes: the sentence is not meant ("I'm not kidding" is).
_NOT_MEANT = re.compile(
    r"\b(?:yeah|yea|ya|yah)\s+right\b|^\s*as\s+if\b|(?:^|\s)/s\s*$|\bj/?k\b"
    r"|(?<!not\s)\b(?:just\s+)?(?:kidding|joking|jesting)\b|\U0001f644|\U0001f61c|\U0001f61d|\U0001f92a",
    re.I,
)

# "I'm tired", "im so hungry", "I'm good, thanks": a state of the moment and nothing else.
_PASSING_STATE = re.compile(
    r"^\s*i(?:'m|\s+am)\s+(?:(?:not|so|very|really|a\s+bit|a\s+little|kinda|kind\s+of|pretty|super|just|too|quite|totally"
    r"|all|finally|now)\s+)*"
    r"(?:tired|exhausted|sleepy|hungry|starving|thirsty|bored|busy|fine|good|ok|okay|alright|great|well|sorry"
    r"|back|here|done|ready|home|awake|up|late|excited|stressed|nervous|confused|lost|happy|sad|upset|angry"
    r"|annoyed|curious|kidding|joking|serious|sure|certain|in\s+a\s+hurry|on\s+my\s+way|running\s+late|glad|relieved)"
    r"(?:[\s,!.]+(?:thanks|thank\s+you|thx|ty|now|today|tonight|lol|haha|again|too|though|and\s+you))*[\s,!.?]*$",
    re.I,
)

# Someone else's word for the user's fact: "my doctor said I ...", "Ann thinks I'm ...",
# "according to my wife, I'm ...". The reporter is anyone but the user ("I said I'm vegan" is a
# complaint, handled as such).
_REPORTER = re.compile(
    r"\b(?!(?:i|we|as|like|already|just|have|had)\b)[\w']+\s+(?:said|says|say|told\s+(?:me|us)|tells\s+(?:me|us)|thinks|think|thought|believes"
    r"|claims|claimed|reckons|insists|insisted|mentioned|assumes|assumed|wrote)\b|\baccording\s+to\b",
    re.I,
)
_USER = re.compile(r"\bi(?:'m|'ve|'d|'ll)?\b", re.I)

# "so" that opens a consequence ("I'm vegan so no cheese please"), not "so" the intensifier: that
# one follows a linking verb ("I'm so hungry", "I feel so tired") or comes before a degree word ("I
# love dogs so much"); "and so" / "or so" is neither.
_SO = re.compile(r"(?P<comma>\s*,\s*|\s+)(?:so|therefore|which\s+means)\s+(?=(?P<next>[\w']+))", re.I)
_LINKING = frozenset(
    "i'm im am is are was were be been being feel feels felt seem seems seemed look looks sound sounds get got "
    "it's that's and or not just do does did".split()
)
_DEGREE = frozenset("much many far long well little few badly often hard fast called so good bad".split())

# Laughter, asides and a dangling "so" after a fact ("I live in Paris lol", "I'm a nurse btw")
_TRAILING_FILLER = re.compile(r"(?:[\s,]+(?:lol|lmao|rofl|haha+|hehe+|xd|btw|fyi|tbh|so|:\)|:d|;\)|:p))+\s*$", re.I)

# Occupations: "I'm a nurse", "I'm a software engineer", "I'm an engineer at Google". The head
# noun names the job; "I'm a fan of jazz" or "I'm a morning person" names none.
_OCCUPATIONS = (
    r"accountant|actor|actress|analyst|architect|artist|assistant|attorney|baker|banker|barista|bartender"
    r"|builder|butcher|carpenter|cashier|chef|chemist|cleaner|clerk|coach|consultant|cook|counsel(?:l)?or"
    r"|dentist|designer|developer|director|doctor|driver|economist|editor|electrician|engineer|farmer"
    r"|firefighter|freelancer|gardener|hairdresser|historian|journalist|judge|lawyer|lecturer|librarian"
    r"|manager|mechanic|midwife|musician|nanny|nurse|paramedic|pharmacist|photographer|physician"
    r"|physiotherapist|pilot|plumber|police\s+officer|policeman|policewoman|professor|programmer"
    r"|psychologist|receptionist|researcher|salesman|saleswoman|scientist|secretary|soldier|student"
    r"|surgeon|teacher|technician|therapist|translator|tutor|vet|veterinarian|waiter|waitress|writer"
)
# A job the user states: "I'm a nurse", "I'm retired", "I started at Google", "I quit my job" (the
# job stored is no longer current).
JOB = (
    r"\bi(?:'m| am)\s+(?:now\s+|currently\s+|still\s+)?(?:an?\s+)(?:(?!of\b)[\w-]+\s+){0,2}?(?:"
    + _OCCUPATIONS
    + r")s?\b(?!\s*(?:'s|of)\b)"
    r"|\bi(?:'m| am)\s+(?:now\s+)?(?:retired|unemployed|self-employed|between\s+jobs)\b"
    r"|\bi(?:'ve| have)?\s+(?:just\s+)?started\s+(?:working\s+)?(?:at|for|with)\b"
    r"|\bi\s+(?:just\s+)?(?:got|started|have|found)\s+a\s+new\s+job\s+(?:at|as|with)\b"
    r"|\bi(?:'ve| have)?\s+(?:just\s+)?(?:quit|left|lost)\s+my\s+job\b"
)
# ...and a change of job, whose new value the next clause gives ("I changed jobs, I'm at Google
# now"): about the user's work, but no fact alone.
JOB_CHANGED = (
    r"\bi(?:'ve| have)?\s+(?:just\s+)?(?:changed|switched)\s+(?:jobs?|careers?)\b"
    r"|\bi\s+(?:just\s+)?(?:got|started|have|found)\s+a\s+new\s+job\b"
)


_YEAR = re.compile(r"\b(?:19|20)\d\d\b")


def dated_before(fact: str, stored: str) -> bool:
    """Whether ``fact`` names a year, and ``stored`` a later one: the older fact is history."""
    new, old = _YEAR.findall(fact), _YEAR.findall(stored)
    return bool(new and old) and max(new) < max(old)


def not_meant(sentence: str) -> bool:
    """Whether ``sentence`` is a joke or sarcasm ("yeah right I live on the moon")."""
    return _NOT_MEANT.search(sentence) is not None


def passing_state(clause: str) -> bool:
    """Whether ``clause`` only states how the user is right now ("I'm tired", "I'm good, thanks")."""
    return _PASSING_STATE.match(clause) is not None


def reported(text: str) -> bool:
    """Whether the user's first-person clause in ``text`` is reported by someone else ("my doctor
    said I live in Lyon")."""
    said = _REPORTER.search(text)
    if said is None:
        return False
    user = _USER.search(text)
    return user is None or said.start() < user.start()


def consequence_split(sentence: str) -> tuple[str, str]:
    """``sentence`` cut before a consequence ("I'm vegan so no cheese please" gives "I'm vegan" and
    "no cheese please"); a sentence without one comes back whole, with "" after it."""
    for m in _SO.finditer(sentence):
        before = sentence[: m.start()].split()
        if m.group("next").lower() in _DEGREE or not before:
            continue
        if "," in m.group("comma") or before[-1].lower() not in _LINKING:
            return sentence[: m.start()], sentence[m.end() :]
    return sentence, ""


def _is_symbol(ch: str) -> bool:
    return unicodedata.category(ch) in {"So", "Sk", "Cs", "Cf", "Mn"} or ch in "\ufe0f\u200d"


def trimmed(fact: str) -> str:
    """``fact`` without the emoji, laughter and punctuation around it."""
    prev = None
    while prev != fact:
        prev = fact
        fact = _TRAILING_FILLER.sub("", fact.rstrip(".!; ,"))
        while fact and (_is_symbol(fact[-1]) or fact[-1].isspace()):
            fact = fact[:-1]
        while fact and (_is_symbol(fact[0]) or fact[0].isspace()):
            fact = fact[1:]
    return fact


# "I'm Annie" / "I'm Annie Smith": "I'm" or "I am", then one to three words (each may be a
# hyphenated pair, "Mary-Jane") that end the clause, every one of them capitalised. The capital is
# the only hint of a name: a capitalised run that goes on in lowercase is a description ("I'm New
# York based", "I'm Real Madrid fan"); words people capitalise after "I'm" are ruled out by name
# below, in any position ("I'm Italian American"); a state ("I'm Fine") by :func:`passing_state`.
_WORD = r"[^\W\d_]+(?:-[^\W\d_]+)?"
_SELF_NAMED = re.compile(
    rf"\b(?i:i(?:'m|\s+am))\s+(?P<name>{_WORD}(?:\s{_WORD}){{0,2}})(?=\s*(?:$|[,.!;?]|\s+(?:and|but|&)\s))"
)
_NOT_NAMES = frozenset(
    # nationalities, peoples and regions
    "american british english scottish welsh irish french german italian spanish portuguese dutch belgian swiss "
    "austrian swedish norwegian danish finnish icelandic polish czech slovak hungarian romanian bulgarian greek "
    "turkish russian ukrainian belarusian serbian croatian bosnian slovenian albanian lithuanian latvian estonian "
    "canadian mexican brazilian argentinian argentine chilean peruvian colombian venezuelan cuban jamaican haitian "
    "dominican australian kiwi chinese japanese korean vietnamese thai filipino filipina indonesian malaysian "
    "singaporean indian pakistani bangladeshi nepali nepalese afghan iranian persian iraqi syrian lebanese "
    "jordanian israeli palestinian egyptian moroccan algerian tunisian libyan saudi emirati qatari kuwaiti yemeni "
    "nigerian ghanaian kenyan ethiopian eritrean somali sudanese ugandan tanzanian rwandan congolese cameroonian "
    "senegalese zimbabwean zambian european asian african latino latina latinx hispanic arab arabic scandinavian "
    "celtic taiwanese mongolian tibetan kazakh uzbek armenian azerbaijani cypriot maltese catalan basque flemish "
    "quebecois texan californian londoner parisian berliner aboriginal indigenous native caucasian "
    # faiths and politics
    "jewish christian catholic protestant muslim moslem hindu buddhist sikh jain mormon atheist agnostic orthodox "
    "evangelical baptist methodist lutheran anglican pagan quaker amish shia sunni religious spiritual democrat "
    "republican liberal conservative libertarian socialist communist independent tory labour green "
    # how someone is, as people type it with a capital
    "ok okay fine good great well alright sorry single married divorced widowed engaged pregnant gay straight bi "
    "bisexual lesbian queer trans transgender nonbinary non-binary deaf blind disabled diabetic autistic dyslexic "
    "epileptic asthmatic coeliac celiac left-handed right-handed vegan vegetarian pescatarian allergic retired "
    "unemployed self-employed new here back home busy free available online offline awake asleep ill sick male "
    "female old young tall short late early done ready sure right wrong lucky honest serious broke rich poor shy "
    "introverted extroverted neurodivergent millennial boomer adopted human "
    # words that follow "I'm" without naming anyone ("count me in": "I'm In")
    "in out up down on off over there all it that this me too also so not just still now yes no same "
    # star signs that are no first names
    "aries taurus gemini cancer virgo libra scorpio sagittarius capricorn aquarius pisces".split()
)


def self_named(text: str) -> bool:
    """Whether ``text`` gives the user's name as "I'm Annie" or "I'm Annie Smith" does: one to
    three capitalised words ending the clause after "I'm", none of them a nationality, faith or
    state ("I'm Italian", "I'm Jewish", "I'm OK", "I'm New York based" are not names)."""
    for m in _SELF_NAMED.finditer(text):
        name = m.group("name")
        words = name.split()
        parts = [p for w in words for p in w.split("-")]
        if not all(p[0].isupper() and any(c.islower() for c in p[1:]) for p in parts):
            continue  # "I'm fine", "I'm OK", "I'm Lyon-based", "I'm New York based"
        if any(w.casefold() in _NOT_NAMES for w in words) or passing_state(f"I'm {name}"):
            continue
        return True
    return False
