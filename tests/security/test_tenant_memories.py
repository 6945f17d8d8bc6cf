"""One memory store, many tenants: what user A stores never reaches user B through the memory
API (list, get, recall, search, history), through the write path (a restatement or a new value of
A's never refreshes or retires B's memory), through another user's memory ids, or through user ids
that differ only by case, spacing, Unicode form or characters a store or a database treats
specially. Forgetting A leaves B whole. Every backend: SQL (SQLite, PostgreSQL), InMemoryStore,
PostgresStore."""

from __future__ import annotations

import unicodedata

import pytest

from memabra import InvalidRecordError, RuleFactExtractor, SQLMemory
from memabra._memory import MemoryBackend
from memabra._memory_restore import restore_memory
from memabra.storage import EpisodeLog

Tenants = tuple[MemoryBackend, EpisodeLog]

# ids that differ only by case, spacing or Unicode form, or hold what a store namespace, a LIKE
# pattern, a glob or a path treats specially: each is a user of its own
LOOKALIKES = [
    "ann",
    "Ann",
    "ANN",
    " ann",
    "ann ",
    "ann\t",
    "ann\u200b",  # a zero-width space
    unicodedata.normalize("NFC", "jos\u00e9"),
    unicodedata.normalize("NFD", "jos\u00e9"),
    "ann/drafts",
    "ann*",
    "*",
    "%",
    "_nn",
    "a_n",
    "ann%",
    "ann.",
    "ann@example.com",
    "ann@example%com",
    "memabra_history",
]


def _texts(memory: MemoryBackend, user: str) -> set[str]:
    return {r.text for r in memory.list(user)}


def _remember_apart(memory: MemoryBackend, users: list[str]) -> dict[str, str]:
    """Each user remembers a fact naming them (by position: ids may hold anything)."""
    facts = {user: f"My secret code word is token{i}x" for i, user in enumerate(users)}
    for user, fact in facts.items():
        memory.remember(user, fact)
    return facts


def test_reads_show_each_user_only_their_own_memories(tenants: Tenants) -> None:
    memory, _ = tenants
    memory.remember_many("alice", ["I live in Hobart", "My dog is called Rex", "I am allergic to peanuts"])
    memory.remember_many("bob", ["I live in Lyon"])
    assert _texts(memory, "bob") == {"I live in Lyon"}
    assert {i.text for i in memory.items("bob")} == {"I live in Lyon"}
    for query in ("Where do I live? Hobart", "dog Rex", "peanuts allergy"):
        assert {i.text for i in memory.recall("bob", query)} == {"I live in Lyon"}
        assert {m.memory.text for m in memory.search("bob", query)} <= {"I live in Lyon"}
    assert {c.id for c in memory.candidates("bob", "Hobart")} == {memory.list("bob")[0].id}
    assert memory.list("carol") == [] and memory.recall("carol", "Hobart") == []


def test_a_large_pool_indexed_for_recall_holds_its_own_user_only(tenants: Tenants) -> None:
    """Pools over 64 memories are cut by a per-process index: keyed by the user, never shared."""
    memory, _ = tenants
    words = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(80)]  # distinct facts, no restatements
    memory.remember_many("alice", [f"I like {w} {w}q {w}z near Hobart" for w in words])
    memory.remember_many("bob", [f"I keep {w} {w}k {w}y in Lyon" for w in words[:70]])
    for _ in range(2):  # built, then read from the index
        assert all("Lyon" in i.text for i in memory.recall("bob", "Hobart like near"))
        assert all("Hobart" in i.text for i in memory.recall("alice", "Lyon keep"))
    assert len(memory.recall("bob", "Hobart like near")) == 48


def test_a_new_value_or_negation_of_one_user_never_retires_anothers(tenants: Tenants) -> None:
    memory, _ = tenants
    memory.remember("bob", "I live in Lyon and my dog is called Rex")
    memory.remember("bob", "I am vegetarian")
    memory.remember("alice", "I live in Lyon")
    extractor = RuleFactExtractor()
    memory.write_from_message("alice", "I moved to Hobart", extractor)
    memory.write_from_message("alice", "I'm not vegetarian", extractor)
    memory.write_from_message("alice", "My dog is called Max", extractor)
    memory.remember_many("alice", ["I live in Perth", "I eat meat again"])
    assert {r.text for r in memory.list("bob", include_retired=False)} == {
        "I live in Lyon and my dog is called Rex",
        "I am vegetarian",
    }
    assert all(len(memory.history("bob", r.id)) == 1 for r in memory.list("bob"))
    assert "I live in Lyon" not in {r.text for r in memory.list("alice", include_retired=False)}


def test_a_restatement_of_another_users_fact_is_a_new_memory_not_a_refresh(tenants: Tenants) -> None:
    memory, _ = tenants
    bob = memory.remember("bob", "I live in Lyon")
    alice = memory.remember("alice", "I live in Lyon")
    assert alice.id != bob.id or type(memory).__name__ == "StoreMemory"  # a store's keys are per namespace
    assert memory.get("bob", bob.id).text == "I live in Lyon"
    assert [c.action.value for c in memory.history("bob", bob.id)] == ["created"]
    assert [c.action.value for c in memory.history("alice", alice.id)] == ["created"]
    memory.remember("alice", "i LIVE in lyon")  # refreshes alice's, never bob's
    assert memory.get("bob", bob.id).text == "I live in Lyon"
    assert [c.action.value for c in memory.history("bob", bob.id)] == ["created"]


def test_another_users_memory_id_is_unknown_to_every_call(tenants: Tenants) -> None:
    memory, _ = tenants
    bob = memory.remember("bob", "I live in Lyon")
    memory.remember("alice", "I live in Hobart")
    calls = [
        lambda: memory.get("alice", bob.id),
        lambda: memory.history("alice", bob.id),
        lambda: memory.update("alice", bob.id, "I live in Paris"),
        lambda: memory.forget("alice", bob.id),
        lambda: restore_memory(memory, "alice", bob.id),
    ]
    if isinstance(memory, SQLMemory):
        calls.append(lambda: memory.retire("alice", bob.id))
    for call in calls:
        with pytest.raises(InvalidRecordError):
            call()
    assert memory.get("bob", bob.id).text == "I live in Lyon"
    assert [c.action.value for c in memory.history("bob", bob.id)] == ["created"]


@pytest.mark.parametrize("victim", ["ann", "Ann", "jos\u00e9", "ann.", "*"])
def test_lookalike_user_ids_are_users_of_their_own(tenants: Tenants, victim: str) -> None:
    """Documented: user ids are compared character for character. So every lookalike is a user of
    its own, none reads or writes another's pool, and forgetting one forgets it alone."""
    memory, _ = tenants
    facts = _remember_apart(memory, LOOKALIKES)
    for user in LOOKALIKES:
        assert _texts(memory, user) == {facts[user]}, user
        assert {i.text for i in memory.recall(user, "secret code word token")} == {facts[user]}, user
    # one lookalike states a new value of the subject: nobody else's code word is retired
    memory.write_from_message(
        unicodedata.normalize("NFC", victim), "My secret code word is hijacked", RuleFactExtractor()
    )
    for user in LOOKALIKES:
        if user != unicodedata.normalize("NFC", victim):
            assert {r.text for r in memory.list(user, include_retired=False)} == {facts[user]}, user
    assert memory.forget_all(victim) >= 1
    assert memory.list(victim) == []
    for user in LOOKALIKES:
        if user != victim:
            assert _texts(memory, user) == {facts[user]}, user


@pytest.mark.parametrize("twin", ["ann\x00", "a\x00nn", "ann\udc80", "ann\ud83d\ude00"])
def test_an_id_the_log_cannot_store_as_given_never_reads_another_users_memories(tenants: Tenants, twin: str) -> None:
    """The SQL log stores text without NUL bytes and with lone surrogates replaced (a pair of them
    joined): "a\\x00nn" would be "ann" there, "ann\\udc80" "ann\\ufffd". Every backend refuses such
    an id (a store could keep it apart, but the turn's episodes would still be logged as the other
    user's): nobody reads or writes another user's memories through one."""
    memory, _ = tenants
    victims = {"ann": "My secret code word is swordfish", "ann\ufffd": "My secret code word is marlin"}
    victims["ann\U0001f600"] = "My secret code word is tuna"
    for user, fact in victims.items():
        memory.remember(user, fact)
    calls = {
        "list": lambda: {r.text for r in memory.list(twin)},
        "items": lambda: {i.text for i in memory.items(twin)},
        "recall": lambda: {i.text for i in memory.recall(twin, "secret code word")},
        "search": lambda: {m.memory.text for m in memory.search(twin, "secret code word")},
        "remember": lambda: {memory.remember(twin, "My secret code word is hijacked").text},
        "write_from_message": lambda: {
            r.text for r in memory.write_from_message(twin, "My secret code word is pwned", RuleFactExtractor())
        },
        "remember_many": lambda: {str(memory.remember_many(twin, ["My secret code word is stolen"]))},
        "forget_all": lambda: {str(memory.forget_all(twin))},
    }
    for call in calls.values():
        with pytest.raises(InvalidRecordError, match="user id"):
            call()
    for user, fact in victims.items():
        assert {r.text for r in memory.list(user, include_retired=False)} == {fact}, user


def test_forgetting_a_user_forgets_them_everywhere_and_nobody_else(tenants: Tenants) -> None:
    memory, _ = tenants
    memory.remember("alice", "I live in Lyon")
    memory.write_from_message("alice", "I moved to Hobart", RuleFactExtractor())
    memory.remember("bob", "I live in Lyon")
    memory.write_from_message("bob", "I moved to Hobart", RuleFactExtractor())
    bob_before = {(r.id, r.text, r.status) for r in memory.list("bob")}
    bob_history = {r.id: memory.history("bob", r.id) for r in memory.list("bob")}
    assert memory.forget_all("alice") == 2
    assert memory.list("alice") == [] and memory.recall("alice", "Hobart") == []
    assert {(r.id, r.text, r.status) for r in memory.list("bob")} == bob_before
    assert {r.id: memory.history("bob", r.id) for r in memory.list("bob")} == bob_history
    # alice starting again starts empty: no history of hers comes back
    again = memory.remember("alice", "I live in Lyon")
    assert [c.action.value for c in memory.history("alice", again.id)] == ["created"]
