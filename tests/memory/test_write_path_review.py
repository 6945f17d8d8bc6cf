"""The write path on messages a product review typed into a chat agent: jobs and names, dated
facts and plans, consequences ("so no cheese please"), reported speech, jokes, passing states,
emoji and several facts in one message. Each case failed before the rule it names
(docs/memory.md, "The write path")."""

from __future__ import annotations

import pytest

from memabra import extract_facts
from memabra._facts import RuleFactExtractor, fact_subject
from memabra._memory import MemoryBackend

RULES = RuleFactExtractor()


def _say(memory: MemoryBackend, *messages: str, user: str = "ann") -> list[str]:
    """Each message through the runtime's write path; the user's current memories after."""
    for message in messages:
        memory.write_from_message(user, message, RULES)
    return sorted(i.text for i in memory.items(user))


@pytest.mark.parametrize(
    ("message", "facts"),
    [
        # "call me X" names the user; "call me back / tomorrow" is a task
        ("call me Annie", ["call me Annie"]),
        ("Please call me Annie", ["Please call me Annie"]),
        ("call me tomorrow", []),
        ("call me back when you can", []),
        ("Call me Dr. Smith", ["Call me Dr. Smith"]),
        ("everyone calls me Annie", ["everyone calls me Annie"]),
        ("my mom calls me every day", []),
        # "we" includes the user where they live
        ("we just moved to Oslo 🙂", ["we just moved to Oslo"]),
        ("I'm vegan so", ["I'm vegan"]),
        # a consequence after "so" is cut off; a first-person one is a fact of its own
        ("I'm vegan so no cheese please", ["I'm vegan"]),
        ("I'm vegan, so please no cheese", ["I'm vegan"]),
        ("I'm vegan so I don't eat cheese", ["I'm vegan", "I don't eat cheese"]),
        ("I'm allergic to nuts 🥜 so be careful", ["I'm allergic to nuts"]),
        ("I live in Lyon, so the weather is mild", ["I live in Lyon"]),
        # ..."so" the intensifier is no cut
        ("I'm so hungry for knowledge about jazz", ["I'm so hungry for knowledge about jazz"]),
        ("I'm so allergic to cats", ["I'm so allergic to cats"]),
        ("I love dogs so much", ["I love dogs so much"]),
        ("I'm vegan and so is my wife", ["I'm vegan and so is my wife"]),
        # "I told" is a complaint only when told to the assistant; "as mentioned" opens one too
        ("I told my mom I live in Lyon", ["I told my mom I live in Lyon"]),
        ("as mentioned, I live in Lyon now", ["I live in Lyon now"]),
        # a joke or sarcasm is not a fact
        ("yeah right I live on the moon", []),
        ("lol i live on the moon 🙄", []),
        ("I'm a millionaire, just kidding", []),
        ("I'm not kidding, I'm vegan", ["I'm vegan"]),
        # a passing state is not a lasting fact
        ("I'm tired", []),
        ("im so hungry", []),
        ("I'm good, thanks", []),
        ("I'm back!", []),
        ("I'm sorry", []),
        ("I'm sure", []),
        # a report covers every clause after it; the user's own clause before it is theirs
        ("my doctor said I'm vegan and I live in Lyon", ["my doctor said I'm vegan and I live in Lyon"]),
        ("I live in Lyon and my mom thinks I'm vegan", ["I live in Lyon", "My mom thinks I'm vegan"]),
        # typed fast: "dont", "just moved", "my name's", thanks before and "btw" after the fact
        ("i dont live in lyon anymore", ["i don't live in lyon anymore"]),
        ("I just moved to paris 🎉🎉", ["I just moved to paris"]),
        ("My name's Annie btw", ["My name's Annie"]),
        ("ok thanks, im vegan btw", ["I'm vegan"]),
        ("Guess what, I moved to Paris!", ["I moved to Paris"]),
        # a question about telling carries its fact; other questions still do not
        ("Did I tell you I moved to Paris?", ["I moved to Paris"]),
        ("Did you know that im vegan??", ["I'm vegan"]),
        ("did I tell you about my trip?", []),
        # the premise of a question is the user's statement
        ("since I live in Lyon now, what's good to eat?", ["I live in Lyon now"]),
        ("Now that I live in Oslo, what should I wear?", ["I live in Oslo"]),
        ("As I said, what is the weather like?", []),
        # emoji and a leading "and" are not part of the fact
        ("i live in paris 😊", ["i live in paris"]),
        ("I live in Paris!!! and my cat is called Tom 🐱", ["I live in Paris", "My cat is called Tom"]),
        ("I live in Paris lol", ["I live in Paris"]),
    ],
)
def test_what_a_message_stores(message: str, facts: list[str]) -> None:
    assert extract_facts(message) == facts


@pytest.mark.parametrize(
    ("fact", "subject"),
    [
        # a job said with "I'm a ..." is the user's work, as "I work as a ..." is
        ("I'm a nurse", "work"),
        ("I'm a nurse now", "work"),
        ("im a software engineer", "work"),
        ("I'm an engineer at Google", "work"),
        ("I'm a retired teacher", "work"),
        ("I changed jobs, I'm at Google now", "work"),
        ("I just started at Google", "work"),
        ("everyone calls me Annie", "name"),
        ("we live in berlin now", "residence"),
        ("I quit my job", "work"),
        ("I'm a fan of jazz", None),
        ("I'm a morning person", None),
        ("My sister is a nurse", None),
        # reported speech is attributed: it has no subject of the user's
        ("My doctor said I live in Lyon", None),
        ("my mom thinks I'm vegan", None),
        ("According to my wife I'm a teacher", None),
        # a plan is a subject of its own: a newer plan replaces it, and so does the move it plans
        ("next month I'm moving to Berlin", "move plan"),
        ("I'm moving to Berlin", "move plan"),
        ("I'm planning to move to New York", "move plan"),
        ("I'm moving my desk to the window", None),
        ("maybe I'm moving to Berlin", None),
        # a dated move is still the current residence
        ("I moved to Oslo in 2021", "residence"),
        ("since last May I live in Rome", "residence"),
    ],
)
def test_subjects(fact: str, subject: str | None) -> None:
    assert fact_subject(fact) == subject


def test_a_new_job_retires_the_old_one(memory: MemoryBackend) -> None:
    assert _say(memory, "I'm a teacher", "I work as a nurse now") == ["I work as a nurse now"]
    assert _say(memory, "I'm a doctor") == ["I'm a doctor"]
    assert _say(memory, "I changed jobs, I'm at Google now") == ["I changed jobs, I'm at Google now"]


def test_a_job_that_ended_retires_it(memory: MemoryBackend) -> None:
    assert _say(memory, "I work at Amazon", "I quit my job") == ["I quit my job"]
    assert _say(memory, "I just started at Google") == ["I just started at Google"]


def test_an_earlier_date_leaves_a_later_one(memory: MemoryBackend) -> None:
    assert _say(memory, "I moved to Rome in 2023", "I moved to Oslo in 2021") == [
        "I moved to Oslo in 2021",
        "I moved to Rome in 2023",
    ]
    assert _say(memory, "I moved to Porto in 2025") == ["I moved to Porto in 2025"]


def test_call_me_is_a_name_a_later_name_replaces(memory: MemoryBackend) -> None:
    assert _say(memory, "call me Annie") == ["call me Annie"]
    assert _say(memory, "my name is Ann") == ["my name is Ann"]
    retired = [r.text for r in memory.list("ann") if r.id not in {i.id for i in memory.items("ann")}]
    assert retired == ["call me Annie"]


def test_dated_facts_and_plans(memory: MemoryBackend) -> None:
    assert _say(memory, "I live in Lyon", "next month I'm moving to Berlin") == [
        "I live in Lyon",
        "next month I'm moving to Berlin",
    ]
    assert _say(memory, "since last May I live in Rome") == [
        "next month I'm moving to Berlin",
        "since last May I live in Rome",
    ]


def test_the_move_a_plan_planned_retires_it_and_a_new_plan_replaces_it(memory: MemoryBackend) -> None:
    assert _say(memory, "I live in Lyon", "I'm moving to Berlin next month", "I'm moving to Oslo in June") == [
        "I live in Lyon",
        "I'm moving to Oslo in June",
    ]
    assert _say(memory, "we moved to Oslo") == ["we moved to Oslo"]


def test_reported_speech_retires_nothing_of_the_users(memory: MemoryBackend) -> None:
    memory.remember("ann", "I live in Paris")
    memory.remember("ann", "I'm vegetarian")
    memory.remember("ann", "I have diabetes")
    current = _say(
        memory,
        "my doctor said I should avoid sugar",
        "Ann told me she lives in Lyon",
        "my doctor said I live in Lyon",
        "my mom thinks I'm vegan",
        "my doctor said I don't have diabetes",
    )
    assert "I live in Paris" in current and "I'm vegetarian" in current and "I have diabetes" in current
    # what is stored says who said it
    assert {t for t in current if t not in {"I live in Paris", "I'm vegetarian", "I have diabetes"}} <= {
        "my doctor said I live in Lyon",
        "my mom thinks I'm vegan",
        "my doctor said I don't have diabetes",
    }


def test_sarcasm_and_passing_states_store_nothing(memory: MemoryBackend) -> None:
    memory.remember("ann", "I live in Paris")
    assert _say(memory, "yeah right I live on the moon", "I'm so tired", "I'm fine thanks") == ["I live in Paris"]


def test_several_facts_in_one_messy_message(memory: MemoryBackend) -> None:
    memory.remember("ann", "I live in Lyon")
    current = _say(memory, "ok so i moved to Oslo 🙂 and my cat is called Tom, i'm vegan so no cheese pls")
    assert current == ["I moved to Oslo", "I'm vegan", "My cat is called Tom"]


def test_news_in_one_message_replaces_the_job_and_the_city(memory: MemoryBackend) -> None:
    memory.remember("ann", "I'm a teacher")
    memory.remember("ann", "I live in Lyon")
    current = _say(memory, "Great news!! I'm a nurse now and we moved to Oslo 🎉")
    assert current == ["I'm a nurse now", "We moved to Oslo"]


@pytest.mark.parametrize(
    ("fact", "subject"),
    [
        ("I'm Annie", "name"),
        ("I am Annie", "name"),
        ("Hi, I'm Annie", "name"),
        ("i'm Zoë", "name"),
        ("I'm Mary-Jane", "name"),
        # two or three capitalised words ending the clause are a full name...
        ("I'm Annie Smith", "name"),
        ("Hello, I'm Anna Maria Rossi, nice to meet you", "name"),
        ("I'm Dr Annie Smith", "name"),
        # ...unless one of them is no name, or a lowercase word follows the capitals ("based", "fan")
        ("I'm New York based", None),
        ("I'm Italian American", None),
        ("I'm Very Tired", None),
        ("I'm So Happy", None),
        ("I'm Annie Smith Jones Brown", None),
        ("I'm Real Madrid fan", None),
        # a capital after "I'm" is no name when the word is a nationality, a faith or a state
        ("I'm Italian", None),
        ("I'm French", None),
        ("I'm Jewish", None),
        ("I'm OK", None),
        ("I'm Fine", None),
        ("I'm In", None),
        ("I'm Lyon-based", None),
        ("I'm annie", None),
        ("I'm not Annie", None),
        # a subject of its own comes first
        ("I'm Vegan", "diet"),
        ("I'm Retired", "work"),
    ],
)
def test_i_m_and_a_capitalised_word_is_a_name(fact: str, subject: str | None) -> None:
    assert fact_subject(fact) == subject


def test_i_m_annie_replaces_a_stated_name_and_a_nationality_does_not(memory: MemoryBackend) -> None:
    assert _say(memory, "my name is Ann", "Hi, I'm Annie") == ["I'm Annie"]
    assert _say(memory, "I'm Italian") == ["I'm Annie", "I'm Italian"]
    assert _say(memory, "I'm Fine. I'm Jewish") == ["I'm Annie", "I'm Italian", "I'm Jewish"]
    assert _say(memory, "call me Jo") == ["I'm Italian", "I'm Jewish", "call me Jo"]


def test_a_full_name_after_i_m_replaces_a_stated_name(memory: MemoryBackend) -> None:
    assert _say(memory, "my name is Ann", "Hi, I'm Annie Smith") == ["I'm Annie Smith"]
    assert _say(memory, "I'm New York based") == ["I'm Annie Smith", "I'm New York based"]
    assert _say(memory, "call me Jo") == ["I'm New York based", "call me Jo"]
