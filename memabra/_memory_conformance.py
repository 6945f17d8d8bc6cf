"""The checks every memory backend must pass, as :func:`~memabra.router.check_router` is for routers.

``check_memory_backend(factory)`` runs memabra's documented memory contracts (docs/memory.md,
"Managing memories" and "The write path") through a backend's public surface and raises
``AssertionError`` naming the first one broken: users never see each other's memories; ``remember``
stores and returns the fact; a restatement refreshes the stored memory instead of adding one; a new
value of a one-value subject retires the memory it replaces (or cuts its part out of a memory
joining several facts), which ``history`` records, ``items`` and recall leave out and ``records``
keeps; a memory keeps its creation time through later writes, and ``records`` lists them oldest
first; ``update``, ``forget`` and ``forget_all`` with their history; ``remember_many`` adding
nothing when run again; ``recall`` and ``search`` bounded by ``limit`` and never another user's; and
bad input (empty text, no user, an id the user does not have) refused with an
:class:`~memabra.InvalidRecordError` naming the problem, nothing written.

The factory takes no arguments. Checks are deterministic without a seed, a clock or an id source:
every write is given its time (``at=``) and ids are only compared with each other, so a backend
with random ids (``SQLMemory``) and one deriving them from the fact (``StoreMemory``) are checked
alike. Each check calls the factory once and writes only users whose id starts with
``conformance-``, its own ones, and forgets them once it passed: the backends may share storage,
provided it holds no memories of those users when the suite starts (a failed check leaves its
users for a look). Not checked: concurrent writers, a process killed midway through
a write, the episode log's side of forgetting, and how well recall ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from memabra._errors import InvalidRecordError
from memabra._memory import MemoryBackend
from memabra._memory_records import MemoryAction, MemoryChange, MemoryRecord, MemoryStatus
from memabra._records import CandidateKind, RegistryItem

__all__ = ["MemoryBackendFactory", "check_memory_backend"]

MemoryBackendFactory = Callable[[], MemoryBackend]

# Every write of the suite is given its time, an hour apart, so that no check waits on a clock.
T0 = datetime(2025, 1, 1, tzinfo=UTC)
# A backend may store times at second precision (a MySQL DATETIME): ``at`` is compared to that.
_TIME_SLACK = timedelta(seconds=1)
_FACTORY_HINT = "check_memory_backend takes a function that builds a new, empty backend: lambda: MyMemory(...)"


def at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


def need(ok: bool, message: str) -> None:
    """``assert`` that survives ``python -O``: the suite is run by users' own test setups."""
    if not ok:
        raise AssertionError(message)


@contextmanager
def contract(name: str) -> Iterator[None]:
    """Every failure inside names the contract: an assertion gets it as a prefix, and any other
    exception (a driver error, a ``KeyError`` of the backend) becomes an assertion naming it."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{name}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - reported as the broken contract, with its cause chained
        raise AssertionError(f"{name}: raised {type(exc).__name__}: {exc}") from exc


def expect_refused(
    backend: MemoryBackend, users: Sequence[str], what: str, naming: str, call: Callable[[], object]
) -> None:
    """``call`` raises :class:`InvalidRecordError` whose message holds ``naming`` (the problem), and
    leaves every memory of ``users`` and its history as it was."""
    before = state(backend, users)
    try:
        call()
    except InvalidRecordError as exc:
        need(
            naming.lower() in str(exc).lower(),
            f"{what}: the InvalidRecordError must name the problem ({naming!r}), it says {str(exc)!r}",
        )
    except Exception as exc:  # noqa: BLE001 - the point is to report the wrong type
        raise AssertionError(f"{what}: raised {type(exc).__name__}: {exc}, expected InvalidRecordError") from exc
    else:
        raise AssertionError(f"{what}: no InvalidRecordError raised")
    need(state(backend, users) == before, f"{what}: refused, but it changed what is stored (it must write nothing)")


def state(backend: MemoryBackend, users: Sequence[str]) -> tuple[object, ...]:
    """What people can see of ``users``' memories: each record and its history."""
    return tuple(
        (
            r.id,
            r.text,
            r.status,
            r.superseded_by,
            tuple((c.action, c.old_text, c.new_text) for c in backend.history(u, r.id)),
        )
        for u in users
        for r in sorted(backend.records(u, include_retired=True), key=lambda r: r.id)
    )


def actions(backend: MemoryBackend, user: str, memory_id: str) -> list[MemoryAction]:
    return [c.action for c in backend.history(user, memory_id)]


def active_texts(backend: MemoryBackend, user: str) -> list[str]:
    return sorted(i.text for i in backend.items(user))


def built(factory: MemoryBackendFactory) -> MemoryBackend:
    backend = factory()
    if not isinstance(backend, MemoryBackend):
        raise TypeError(f"the factory returned a {type(backend).__name__}, not a MemoryBackend: {_FACTORY_HINT}")
    return backend


def check_empty(backend: MemoryBackend, users: Sequence[str]) -> None:
    for user in users:
        held = [r.text for r in backend.records(user, include_retired=True)]
        need(
            not held,
            f"user {user!r} holds {held!r} before the check wrote any: the factory must return an empty backend "
            "(or one whose storage holds no conformance-* users: a check that failed leaves its own, "
            "forget_all them), and no user may see another's memories",
        )


def check_stored(backend: MemoryBackend, user: str, item: RegistryItem, text: str, when: datetime) -> MemoryRecord:
    """``item``, just returned by ``remember``, is the fact as stored."""
    need(isinstance(item, RegistryItem), f"remember returned a {type(item).__name__}, not a RegistryItem")
    need(
        item.kind is CandidateKind.MEMORY and item.owner == user and item.text == text and bool(item.id),
        f"remember({user!r}, {text!r}) returned {item.kind.value} {item.id!r} of {item.owner!r} with text "
        f"{item.text!r}: expected a memory of {user!r} with that text",
    )
    record = backend.get(user, item.id)
    need(isinstance(record, MemoryRecord), f"get returned a {type(record).__name__}, not a MemoryRecord")
    need(
        (record.id, record.user_id, record.text, record.status) == (item.id, user, text, MemoryStatus.ACTIVE),
        f"get({user!r}, {item.id!r}) gives {record!r}: expected the active memory {text!r}",
    )
    for name in ("created_at", "updated_at"):
        value = getattr(record, name)
        need(value.tzinfo is not None, f"memory {item.id!r}: {name} {value!r} has no time zone (store times in UTC)")
    need(item.id in {i.id for i in backend.items(user)}, f"items({user!r}) leaves out the memory just remembered")
    for include in (True, False):
        need(
            item.id in {r.id for r in backend.records(user, include_retired=include)},
            f"records({user!r}, include_retired={include}) leaves out the memory just remembered",
        )
    changes = backend.history(user, item.id)
    need(bool(changes), f"history({user!r}, {item.id!r}) is empty: a memory's creation is its first change")
    check_change(changes[0], MemoryAction.CREATED, None, text, when)
    return record


def check_change(
    change: MemoryChange | None,
    action: MemoryAction,
    old_text: str | None,
    new_text: str | None,
    when: datetime | None = None,
    episode_id: str | None = None,
) -> None:
    need(change is not None, f"history has no {action.value} change")
    assert change is not None  # for the type checker: need() raised otherwise
    got = (change.action, change.old_text, change.new_text)
    need(
        got == (action, old_text, new_text),
        f"history of {change.memory_id!r} records {got}, expected ({action.value}, {old_text!r}, {new_text!r})",
    )
    need(change.at.tzinfo is not None, f"a history change's time {change.at!r} has no time zone")
    if when is not None:
        need(abs(change.at - when) <= _TIME_SLACK, f"the {action.value} change is dated {change.at}, the write {when}")
    if episode_id is not None:
        need(
            change.episode_id == episode_id,
            f"the {action.value} change names episode {change.episode_id!r}, not {episode_id!r}",
        )


# ---------------------------------------------------------------------- the write path


def check_remember(backend: MemoryBackend) -> None:
    user = "conformance-remember"
    item = backend.remember(user, "My dog is called Rex", at=at(0), episode_id="conformance-e1")
    check_stored(backend, user, item, "My dog is called Rex", at(0))
    need(backend.history(user, item.id)[0].episode_id == "conformance-e1", "the created change lost its episode id")
    need(len(backend.history(user, item.id)) == 1, "a memory remembered once has more than its creation in history")
    fact = backend.remember(user, "I already told you: I'm vegetarian.", at=at(1))
    need(fact.text == "I'm vegetarian", f"a correction must be stored as its fact, not {fact.text!r}")
    need(active_texts(backend, user) == ["I'm vegetarian", "My dog is called Rex"], "items() lost or added a memory")


# the third holds a '.', which a LangGraph store escapes in its namespace label
ISOLATION_USERS = ("conformance-isolation-ann", "conformance-isolation-bob", "conformance-isolation.ann@example.com")


def check_isolation(backend: MemoryBackend) -> None:
    ann, bob, dotted = users = ISOLATION_USERS
    mine = backend.remember(ann, "I live in Lyon", at=at(0))
    theirs = backend.remember(bob, "I live in Lyon", at=at(1))
    backend.remember(dotted, "I am allergic to peanuts", at=at(2))
    need(
        actions(backend, ann, mine.id) == [MemoryAction.CREATED],
        "the same fact stated by another user refreshed this user's memory: a restatement is per user",
    )
    check_stored(backend, bob, theirs, "I live in Lyon", at(1))
    backend.remember(bob, "I moved to Hobart", at=at(3))
    need(
        backend.get(ann, mine.id).status is MemoryStatus.ACTIVE,
        "another user's new residence retired this user's: supersession is per user",
    )
    for user in users:
        others = {i.owner for i in backend.items(user)} | {r.user_id for r in backend.records(user)}
        need(others == {user}, f"items/records of {user!r} hold memories of {sorted(others - {user})!r}")
        for query in ("where do I live", "peanuts Lyon Hobart"):
            leaked = {i.owner for i in backend.recall(user, query)} - {user}
            leaked |= {h.memory.user_id for h in backend.search(user, query)} - {user}
            need(not leaked, f"recall/search of {user!r} for {query!r} returned memories of {sorted(leaked)!r}")
    if theirs.id not in {r.id for r in backend.records(ann)}:  # ids may repeat across users; here they do not
        for what, call in (
            ("get", lambda: backend.get(ann, theirs.id)),
            ("history", lambda: backend.history(ann, theirs.id)),
            ("update", lambda: backend.update(ann, theirs.id, "I live in Paris")),
            ("forget", lambda: backend.forget(ann, theirs.id)),
        ):
            expect_refused(backend, users, f"{what} of another user's memory id", theirs.id, call)
    kept = state(backend, (bob, dotted))
    count = backend.forget_all(ann)
    need(count == 1, f"forget_all of a user with one memory returned {count}")
    need(state(backend, (bob, dotted)) == kept, "forget_all of one user changed another user's memories")


def check_restatement(backend: MemoryBackend) -> None:
    user = "conformance-restatement"
    first = backend.remember(user, "I am vegetarian", at=at(0), episode_id="conformance-e1")
    before = backend.get(user, first.id)
    began = datetime.now(UTC).replace(microsecond=0)
    again = backend.remember(user, "I am a vegetarian", at=at(1), episode_id="conformance-e2")
    stored = [r.text for r in backend.records(user, include_retired=True)]
    need(
        len(stored) == 1,
        f"a restatement must refresh the stored memory, not add one: {user!r} holds {stored!r} "
        "(_refresh replaces the memory's text; the write path finds it through _read_active / items)",
    )
    need(again.id == first.id, f"remember of a restatement returned {again.id!r}, not the refreshed {first.id!r}")
    record = backend.get(user, first.id)
    need(record.text == "I am a vegetarian", f"a refreshed memory takes the newest wording, it kept {record.text!r}")
    need(again.text == record.text, "remember of a restatement returned the old wording")
    # the write's own time (at=), or the store's clock, kept to the second by some (SqliteStore)
    need(
        record.updated_at > before.updated_at or record.updated_at >= began,
        f"a refreshed memory's update time did not move: {before.updated_at} before, {record.updated_at} after",
    )
    need(record.status is MemoryStatus.ACTIVE, "a refreshed memory is no longer active")
    history = backend.history(user, first.id)
    need([c.action for c in history] == [MemoryAction.CREATED, MemoryAction.REFRESHED], f"history is {history!r}")
    check_change(history[1], MemoryAction.REFRESHED, "I am vegetarian", "I am a vegetarian", at(1), "conformance-e2")
    # changes of one instant keep the order they happened in
    jazz = backend.remember(user, "I like jazz", at=at(2))
    backend.remember(user, "I like jazz.", at=at(2))
    order = actions(backend, user, jazz.id)
    need(order == [MemoryAction.CREATED, MemoryAction.REFRESHED], f"history of one instant reads {order}, out of order")


SUPERSESSION_USERS = ("conformance-supersession", "conformance-supersession-joined")


def check_supersession(backend: MemoryBackend) -> None:
    user, joined_user = SUPERSESSION_USERS
    lyon = backend.remember(user, "I live in Lyon", at=at(0))
    allergy = backend.remember(user, "I am allergic to peanuts", at=at(1))
    hobart = backend.remember(user, "I moved to Hobart", at=at(2), episode_id="conformance-move")
    active = {i.id for i in backend.items(user)}
    need(
        active == {allergy.id, hobart.id},
        f"after 'I moved to Hobart' the active memories are {active_texts(backend, user)!r}: a new value of a "
        "one-value subject retires the old one, facts that may coexist stay (_store must apply `retire`)",
    )
    old = backend.get(user, lyon.id)
    need(
        (old.status, old.text, old.superseded_by) == (MemoryStatus.RETIRED, "I live in Lyon", hobart.id),
        f"the replaced memory reads {old!r}: retired, its text kept, superseded_by the new fact",
    )
    need(lyon.id in {r.id for r in backend.records(user)}, "records() must keep retired memories (include_retired)")
    need(
        lyon.id not in {r.id for r in backend.records(user, include_retired=False)},
        "records(include_retired=False) returned a retired memory",
    )
    last = backend.history(user, lyon.id)[-1]
    check_change(last, MemoryAction.RETIRED, "I live in Lyon", None, at(2), "conformance-move")
    need(
        lyon.id not in {i.id for i in backend.recall(user, "where do I live in Lyon")},
        "recall offered a retired memory",
    )
    need(lyon.id not in {h.memory.id for h in backend.search(user, "Lyon")}, "search found a retired memory")
    # a memory joining several facts loses only the replaced one
    joined = backend.remember(joined_user, "I live in Lyon and my dog is called Rex", at=at(0))
    moved = backend.remember(joined_user, "I moved to Hobart", at=at(1))
    cut = backend.get(joined_user, joined.id)
    need(
        (cut.status, cut.text) == (MemoryStatus.ACTIVE, "My dog is called Rex"),
        f"'I moved to Hobart' must cut 'I live in Lyon' out of {joined.text!r}, leaving it {cut.text!r} "
        f"({cut.status.value}); _store must apply `cut`",
    )
    change = backend.history(joined_user, joined.id)[-1]
    check_change(change, MemoryAction.UPDATED, joined.text, "My dog is called Rex", at(1))
    need(moved.id in change.reason, f"the cut's reason {change.reason!r} must name the memory that caused it")
    # moving back: one current residence, the fact stated again
    backend.remember(user, "I live in Lyon", at=at(3))
    need(
        active_texts(backend, user) == ["I am allergic to peanuts", "I live in Lyon"],
        f"moving back to Lyon leaves {active_texts(backend, user)!r} current: one residence at a time",
    )


def check_creation_time(backend: MemoryBackend) -> None:
    user = "conformance-creation-time"
    lyon = backend.remember(user, "I live in Lyon", at=at(0))
    jazz = backend.remember(user, "I like jazz", at=at(1))
    dog = backend.remember(user, "My dog is called Rex", at=at(2))
    created = {r.id: r.created_at for r in backend.records(user)}
    backend.remember(user, "I like jazz.", at=at(3))  # refreshes
    backend.update(user, dog.id, "My dog is called Max")
    hobart = backend.remember(user, "I moved to Hobart", at=at(4))  # retires Lyon
    for record in backend.records(user):
        was = created.get(record.id, record.created_at)
        need(
            record.created_at == was,
            f"memory {record.text!r} was created at {was}, after a refresh, an update or its retirement it reads "
            f"{record.created_at}: a write must keep a memory's creation time",
        )
    # oldest first, by creation times in the order of the writes; a store keeping times to the
    # second (SqliteStore) lists one second's memories in any order
    listed = backend.records(user)
    times = [r.created_at for r in listed]
    written = {r.id: r.created_at for r in listed}
    in_order = [written[m.id] for m in (lyon, jazz, dog, hobart)]
    need(
        times == sorted(times) and in_order == sorted(in_order),
        f"records() lists {[r.text for r in listed]!r} created at {times}: the user's memories, oldest first",
    )


def all_checks() -> tuple[tuple[str, tuple[str, ...], Callable[[MemoryBackend], None]], ...]:
    """Every check: its contract, the users it writes (empty when it starts), and the check."""
    from memabra._memory_conformance_manage import CHECKS as MANAGE  # it builds on this module

    return (
        ("users are isolated", ISOLATION_USERS, check_isolation),
        ("remember stores and returns the fact", ("conformance-remember",), check_remember),
        ("a restatement refreshes the stored memory", ("conformance-restatement",), check_restatement),
        ("a new value retires the one it replaces", SUPERSESSION_USERS, check_supersession),
        ("records are oldest first and keep their creation time", ("conformance-creation-time",), check_creation_time),
        *MANAGE,
    )


def run_check(factory: MemoryBackendFactory, name: str) -> None:
    """One check of :func:`check_memory_backend`, by its contract's name."""
    [(users, check)] = [(users, check) for contract_name, users, check in all_checks() if contract_name == name]
    backend = built(factory)
    with contract(name):
        check_empty(backend, users)
        check(backend)
        # what it wrote goes, so the suite runs again on the same storage (a failed check leaves
        # its users for a look: the next run names them)
        for user in users:
            backend.forget_all(user)


def check_memory_backend(factory: MemoryBackendFactory) -> None:
    """Run every memory contract against backends built by ``factory()`` (a new one per check,
    over fresh storage or shared: each check writes users of its own, see the module's docstring);
    raises ``AssertionError`` naming the first contract broken, ``TypeError`` where ``factory``
    builds no :class:`~memabra.MemoryBackend`."""
    if not callable(factory) or isinstance(factory, MemoryBackend):
        raise TypeError(f"check_memory_backend got a {type(factory).__name__}: {_FACTORY_HINT}")
    for name, _, _ in all_checks():
        run_check(factory, name)
