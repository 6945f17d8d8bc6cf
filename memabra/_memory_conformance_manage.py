"""The management half of :func:`~memabra._memory_conformance.check_memory_backend`: ``update``,
``forget`` and ``forget_all`` with their history, ``remember_many`` run twice, ``recall`` and
``search`` bounded by ``limit``, and bad input refused with nothing written."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from memabra._memory import MemoryBackend
from memabra._memory_conformance import (
    T0,
    actions,
    active_texts,
    at,
    check_change,
    expect_refused,
    need,
    state,
)
from memabra._memory_records import MemoryAction, MemoryStatus
from memabra._recall import RECALL_ALL
from memabra._records import CandidateKind, RegistryItem

__all__ = ["CHECKS"]

# An id no backend hands out: its errors must name it.
_UNKNOWN_ID = "conformance-no-such-memory"


def check_update(backend: MemoryBackend) -> None:
    user = "conformance-update"
    colour = backend.remember(user, "My favourite colour is green", at=at(0))
    jazz = backend.remember(user, "I like jazz", at=at(1))
    jazz_before = backend.history(user, jazz.id)
    record = backend.update(
        user, colour.id, "My favourite colour is blue", episode_id="conformance-edit", reason="conformance"
    )
    need(
        (record.id, record.text, record.status) == (colour.id, "My favourite colour is blue", MemoryStatus.ACTIVE),
        f"update returned {record!r}: the same memory, active, with the new text",
    )
    need(backend.get(user, colour.id).text == record.text, "get after update shows the old text")
    need(
        active_texts(backend, user) == ["I like jazz", "My favourite colour is blue"]
        and len(backend.records(user)) == 2,
        f"update must rewrite the memory in place, the user holds {[r.text for r in backend.records(user)]!r}",
    )
    change = backend.history(user, colour.id)[-1]
    check_change(change, MemoryAction.UPDATED, "My favourite colour is green", "My favourite colour is blue")
    need(
        (change.episode_id, change.reason) == ("conformance-edit", "conformance"),
        f"the update's history entry has episode {change.episode_id!r} and reason {change.reason!r}: keep both",
    )
    need(backend.history(user, jazz.id) == jazz_before, "update of one memory changed another's history")
    users = (user,)
    expect_refused(
        backend, users, "update of an unknown id", _UNKNOWN_ID, lambda: backend.update(user, _UNKNOWN_ID, "x")
    )
    expect_refused(backend, users, "update to empty text", "text", lambda: backend.update(user, colour.id, "  "))
    backend.remember(user, "My favourite colour is red", at=at(2))  # retires blue
    expect_refused(
        backend, users, "update of a retired memory", "retired", lambda: backend.update(user, colour.id, "I like blue")
    )


def check_forget(backend: MemoryBackend) -> None:
    user, other = "conformance-forget", "conformance-forget-other"
    dog = backend.remember(user, "My dog is called Rex", at=at(0))
    backend.update(user, dog.id, "My dog is called Max")
    jazz = backend.remember(user, "I like jazz", at=at(1))
    backend.remember(other, "My dog is called Rex", at=at(2))
    kept = state(backend, (other,))
    backend.forget(user, dog.id)
    expect_refused(backend, (user, other), "get of a forgotten memory", dog.id, lambda: backend.get(user, dog.id))
    expect_refused(
        backend, (user, other), "history of a forgotten memory", dog.id, lambda: backend.history(user, dog.id)
    )
    expect_refused(backend, (user, other), "forgetting a memory twice", dog.id, lambda: backend.forget(user, dog.id))
    expect_refused(
        backend, (user, other), "forget of an unknown id", _UNKNOWN_ID, lambda: backend.forget(user, _UNKNOWN_ID)
    )
    need([i.id for i in backend.items(user)] == [jazz.id], "forget left the memory in items() or took another")
    need([r.id for r in backend.records(user)] == [jazz.id], "forget left the memory in records() or took another")
    need(state(backend, (other,)) == kept, "forgetting one user's memory changed another user's")
    # forgetting deletes the history: a forgotten fact is imported again, and comes back with none
    again = backend.remember_many(user, ["My dog is called Rex"], at=at(3))
    need(
        [i.text for i in again] == ["My dog is called Rex"],
        "remember_many skipped a fact whose memory was forgotten: _forget must delete the memory's history too "
        "(an import skips only texts the user's memories have or had)",
    )
    history = actions(backend, user, again[0].id)
    need(
        history == [MemoryAction.CREATED],
        f"a forgotten fact remembered again has the history {[a.value for a in history]}: _forget must delete "
        "the memory's history with it",
    )
    backend.remember(user, "I live in Lyon", at=at(4))
    backend.remember(user, "I moved to Hobart", at=at(5))  # a retired memory is forgotten too
    held = backend.records(user, include_retired=True)
    count = backend.forget_all(user)
    need(count == len(held), f"forget_all returned {count}, the user had {len(held)} memories (retired ones too)")
    need(backend.records(user, include_retired=True) == [] and backend.items(user) == [], "forget_all left memories")
    for record in held:
        expect_refused(
            backend, (user,), "history after forget_all", record.id, partial(backend.history, user, record.id)
        )
    need(backend.forget_all(user) == 0, "forget_all of a user with no memories must return 0")
    need(state(backend, (other,)) == kept, "forget_all of one user changed another user's memories")


_IMPORT = [
    "I live in Lyon",
    "I am allergic to peanuts",
    "My dog is called Rex",
    "I moved to Hobart",
    "I am allergic to peanuts.",
]


def check_remember_many(backend: MemoryBackend) -> None:
    user = "conformance-import"
    first = backend.remember_many(user, _IMPORT, at=at(0))
    need(
        all(isinstance(i, RegistryItem) and i.owner == user and i.kind is CandidateKind.MEMORY for i in first),
        "remember_many must return the user's new memories",
    )
    need(
        sorted(i.text for i in first) == sorted(set(_IMPORT[:4])),
        f"remember_many of {_IMPORT!r} returned {[i.text for i in first]!r}: each fact once, its restatement skipped",
    )
    need(
        active_texts(backend, user) == ["I am allergic to peanuts", "I moved to Hobart", "My dog is called Rex"]
        and len(backend.records(user)) == 4,
        f"after the import the user holds {[(r.text, r.status.value) for r in backend.records(user)]!r}: "
        "'I moved to Hobart' must retire 'I live in Lyon', the restatement add nothing",
    )
    before = state(backend, (user,))
    again = backend.remember_many(user, _IMPORT, at=at(1))
    need(
        again == [] and state(backend, (user,)) == before,
        f"remember_many run again returned {[i.text for i in again]!r} and "
        f"{'left' if state(backend, (user,)) == before else 'changed'} the memories: it must add and retire nothing",
    )
    # a text a memory had before an update is known too
    [dog] = [r for r in backend.records(user) if r.text == "My dog is called Rex"]
    backend.update(user, dog.id, "My dog is called Max")
    need(
        backend.remember_many(user, ["My dog is called Rex"], at=at(2)) == [],
        "remember_many stored a text a memory had before an update: an import skips every text the user's "
        "memories have or had (their history's too)",
    )


def _facts(n: int, tag: str) -> list[str]:
    # two words of each fact are its own: no two restate each other (they differ by two content words)
    return [f"I collect {tag}{i:03d}x stamps from {tag}{i:03d}y" for i in range(n)]


def check_recall(backend: MemoryBackend) -> None:
    user, other, small = "conformance-recall", "conformance-recall-other", "conformance-recall-small"
    n = RECALL_ALL + 6  # a pool over RECALL_ALL is cut to `limit`
    backend.remember_many(user, _facts(n, "ann"), at=T0)
    backend.remember_many(other, _facts(n, "bob"), at=T0)
    active = {i.id for i in backend.items(user)}
    need(len(active) == n, f"remember_many of {n} distinct facts left {len(active)} active memories")
    for query in ("stamps", "which stamps do I collect from bob001y"):
        for limit in (1, 5, 12):
            recalled = backend.recall(user, query, limit=limit)
            need(len(recalled) <= limit, f"recall(limit={limit}) over {n} memories returned {len(recalled)}")
            need(
                {i.id for i in recalled} <= active,
                f"recall for {query!r} returned ids that are not the user's active memories",
            )
            need({i.owner for i in recalled} <= {user}, f"recall for {query!r} returned another user's memory")
            hits = backend.search(user, query, limit=limit)
            need(len(hits) <= limit, f"search(limit={limit}) returned {len(hits)}")
            need(
                {h.memory.id for h in hits} <= active and {h.memory.user_id for h in hits} <= {user},
                f"search for {query!r} returned a memory that is not one of the user's active memories",
            )
            scores = [h.score for h in hits]
            need(scores == sorted(scores, reverse=True), f"search must rank best first, its scores are {scores}")
    # a small pool: everything active, nothing retired
    backend.remember(small, "I live in Lyon", at=at(0))
    backend.remember(small, "I like jazz", at=at(1))
    backend.remember(small, "I moved to Hobart", at=at(2))
    pool = {i.id for i in backend.items(small)}
    offered = {i.id for i in backend.recall(small, "where do I live")}
    need(
        offered == pool and len(pool) == 2,
        f"recall over a pool of {len(pool)} active memories offered {len(offered)} (ids outside the pool: "
        f"{sorted(offered - pool)}): a pool of at most {RECALL_ALL} goes to the router whole, nothing retired",
    )


def check_bad_input(backend: MemoryBackend) -> None:
    user, other = "conformance-bad-input", "conformance-bad-input-other"
    users = (user, other)
    lyon = backend.remember(user, "I live in Lyon", at=at(0))
    backend.remember(other, "I like jazz", at=at(1))
    for text in ("", "   ", "...", "I already told you"):
        expect_refused(backend, users, f"remember of {text!r}", "text", partial(backend.remember, user, text))
    refuse: list[tuple[str, str, Callable[[], object]]] = [
        ("remember of a non-string", "text", lambda: backend.remember(user, None)),  # type: ignore[arg-type]
        ("remember with an empty user id", "user", lambda: backend.remember("", "I like tea")),
        ("remember_many with an empty user id", "user", lambda: backend.remember_many("", ["I like tea"])),
        (
            "remember_many with an empty second fact (checked before the first write)",
            "fact 2",
            lambda: backend.remember_many(user, ["I like tea", ""]),
        ),
        ("forget_all with an empty user id", "user", lambda: backend.forget_all("")),
        ("records with an empty user id", "user", lambda: backend.records("")),
        ("items with an empty user id", "user", lambda: backend.items("")),
        ("get of an unknown id", _UNKNOWN_ID, lambda: backend.get(user, _UNKNOWN_ID)),
        ("history of an unknown id", _UNKNOWN_ID, lambda: backend.history(user, _UNKNOWN_ID)),
        ("update to empty text", "text", lambda: backend.update(user, lyon.id, "")),
        ("search with an empty query", "query", lambda: backend.search(user, " ")),
    ]
    for what, naming, call in refuse:
        expect_refused(backend, users, what, naming, call)
    need(backend.get(user, lyon.id).status is MemoryStatus.ACTIVE, "a refused write retired a memory")


CHECKS: tuple[tuple[str, tuple[str, ...], Callable[[MemoryBackend], None]], ...] = (
    ("update rewrites a memory with its history", ("conformance-update",), check_update),
    (
        "forget and forget_all delete memories and their history",
        ("conformance-forget", "conformance-forget-other"),
        check_forget,
    ),
    ("remember_many adds nothing when run again", ("conformance-import",), check_remember_many),
    (
        "recall and search are bounded by limit and never another user's",
        ("conformance-recall", "conformance-recall-other", "conformance-recall-small"),
        check_recall,
    ),
    (
        "bad input is refused and writes nothing",
        ("conformance-bad-input", "conformance-bad-input-other"),
        check_bad_input,
    ),
)
