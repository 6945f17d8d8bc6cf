"""Memory management over every backend: list, search, update with history, forget one or all,
supersession on write, corrections stored as their fact."""

from __future__ import annotations

import pytest

from memabra import InvalidRecordError, MemoryStatus
from memabra._memory import MemoryAction, MemoryBackend
from memabra.storage import EpisodeLog


def texts(memory: MemoryBackend, user: str = "ann") -> list[str]:
    return sorted(i.text for i in memory.items(user))


def test_list_shows_id_text_status_created_and_last_used(memory: MemoryBackend) -> None:
    item = memory.remember("ann", "My dog is called Rex")
    [record] = memory.list("ann")
    assert (record.id, record.text, record.status) == (item.id, "My dog is called Rex", MemoryStatus.ACTIVE)
    assert record.created_at.tzinfo is not None and record.last_used_at is None


def test_a_restatement_refreshes_the_memory_instead_of_adding_one(memory: MemoryBackend) -> None:
    first = memory.remember("ann", "I am vegetarian", episode_id="e1")
    again = memory.remember("ann", "I am vegetarian.", episode_id="e2")
    assert again.id == first.id and texts(memory) == ["I am vegetarian"]
    assert [c.action for c in memory.history("ann", first.id)] == [MemoryAction.CREATED, MemoryAction.REFRESHED]
    assert memory.history("ann", first.id)[1].episode_id == "e2"


def test_a_correction_is_stored_as_its_fact_never_as_the_complaint(memory: MemoryBackend) -> None:
    item = memory.remember("ann", "I already told you I'm vegetarian")
    assert item.text == "I'm vegetarian"
    memory.remember("ann", "I already told you: I'm vegetarian.")
    memory.remember("ann", "I'm vegetarian, as I said.")
    assert texts(memory) == ["I'm vegetarian"]
    assert all(
        "told" not in (c.new_text or "") and "said" not in (c.new_text or "") for c in memory.history("ann", item.id)
    )


def test_a_new_fact_on_the_same_subject_retires_the_old_one(memory: MemoryBackend) -> None:
    lyon = memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "I am allergic to peanuts")
    hobart = memory.remember("ann", "I moved to Hobart", episode_id="ep-move")
    assert texts(memory) == ["I am allergic to peanuts", "I moved to Hobart"]
    retired = memory.get("ann", lyon.id)
    assert retired.status is MemoryStatus.RETIRED and retired.superseded_by == hobart.id
    assert lyon.id in {r.id for r in memory.list("ann")} and lyon.id not in {
        r.id for r in memory.list("ann", include_retired=False)
    }
    last = memory.history("ann", lyon.id)[-1]
    assert last.action is MemoryAction.RETIRED and last.episode_id == "ep-move"
    assert lyon.id not in {c.id for c in memory.candidates("ann", "where do I live?")}
    assert lyon.id not in {h.memory.id for h in memory.search("ann", "Lyon")}


def test_facts_that_may_coexist_do_not_retire_each_other(memory: MemoryBackend) -> None:
    memory.remember("ann", "I am allergic to peanuts")
    memory.remember("ann", "I am allergic to sesame")
    memory.remember("ann", "I like jazz")
    assert len(memory.items("ann")) == 3


def test_a_passing_state_or_event_never_retires_a_standing_fact(memory: MemoryBackend) -> None:
    memory.remember("ann", "My dog is called Rex")
    memory.remember("ann", "My sister is a doctor")
    memory.remember("ann", "My dog is sick")
    memory.remember("ann", "My sister is visiting next week")
    assert texts(memory) == [
        "My dog is called Rex",
        "My dog is sick",
        "My sister is a doctor",
        "My sister is visiting next week",
    ]
    assert {r.status for r in memory.list("ann")} == {MemoryStatus.ACTIVE}


def test_a_new_fact_replaces_only_its_part_of_a_memory_stored_whole(memory: MemoryBackend) -> None:
    # stored before facts were split, or through remember() as one text
    both = memory.remember("ann", "I live in Lyon and my dog is called Rex")
    hobart = memory.remember("ann", "I moved to Hobart", episode_id="ep-move")
    assert texts(memory) == ["I moved to Hobart", "My dog is called Rex"]
    last = memory.history("ann", both.id)[-1]
    assert (last.action, last.old_text, last.new_text, last.episode_id, last.reason) == (
        MemoryAction.UPDATED,
        "I live in Lyon and my dog is called Rex",
        "My dog is called Rex",
        "ep-move",
        f"part superseded by {hobart.id}",
    )
    # the rest stays the same memory, with its id and history; a fact replacing all of it retires it
    memory.remember("ann", "My dog is called Max")
    assert memory.get("ann", both.id).status is MemoryStatus.RETIRED
    assert texts(memory) == ["I moved to Hobart", "My dog is called Max"]


def test_restating_one_part_of_a_memory_stored_whole_loses_nothing(memory: MemoryBackend) -> None:
    memory.remember("ann", "My name is Ann and I live in Lyon")
    memory.remember("ann", "I live in Lyon")
    assert texts(memory) == ["I live in Lyon", "My name is Ann and I live in Lyon"]


def test_update_keeps_history_of_what_changed_when_and_from_which_episode(memory: MemoryBackend) -> None:
    item = memory.remember("ann", "My dog is called Rex")
    updated = memory.update("ann", item.id, "My dog is called Luna", episode_id="ep-7")
    assert updated.id == item.id and updated.text == "My dog is called Luna"
    change = memory.history("ann", item.id)[-1]
    assert (change.action, change.old_text, change.new_text, change.episode_id) == (
        MemoryAction.UPDATED,
        "My dog is called Rex",
        "My dog is called Luna",
        "ep-7",
    )
    assert change.at >= item.created_at
    assert texts(memory) == ["My dog is called Luna"]


def test_forget_one_memory(memory: MemoryBackend) -> None:
    dog = memory.remember("ann", "My dog is called Rex")
    memory.remember("ann", "I am vegetarian")
    memory.forget("ann", dog.id)
    assert texts(memory) == ["I am vegetarian"]
    assert dog.id not in {r.id for r in memory.list("ann")}
    with pytest.raises(InvalidRecordError, match="no memory"):
        memory.history("ann", dog.id)


def test_forgetting_an_unknown_memory_is_an_error_and_forgets_nothing(memory: MemoryBackend) -> None:
    memory.remember("ann", "I am vegetarian")
    with pytest.raises(InvalidRecordError, match="no memory 'mem:nope'"):
        memory.forget("ann", "mem:nope")
    assert texts(memory) == ["I am vegetarian"]


def test_forget_all_forgets_one_user_only(memory: MemoryBackend) -> None:
    memory.remember("ann", "I am vegetarian")
    memory.remember("ann", "I live in Lyon")
    memory.remember("bob", "I live in Oslo")
    assert memory.forget_all("ann") == 2
    assert memory.items("ann") == [] and memory.list("ann") == []
    assert texts(memory, "bob") == ["I live in Oslo"]


def test_users_never_see_each_others_memories(memory: MemoryBackend) -> None:
    item = memory.remember("ann", "I live in Lyon")
    memory.remember("bob", "I live in Oslo")
    assert texts(memory, "bob") == ["I live in Oslo"]
    with pytest.raises(InvalidRecordError):
        memory.forget("bob", item.id)
    with pytest.raises(InvalidRecordError):
        memory.update("bob", item.id, "hijacked")
    assert texts(memory) == ["I live in Lyon"]


def test_search_ranks_the_relevant_memory_first(memory: MemoryBackend) -> None:
    for fact in ("I live in Lyon", "My dog is called Rex", "I am vegetarian", "I work as a nurse at St Anne clinic"):
        memory.remember("ann", fact)
    hits = memory.search("ann", "what is my dog called", limit=2)
    assert hits[0].memory.text == "My dog is called Rex" and len(hits) == 2
    assert hits[0].score > hits[1].score
    with pytest.raises(InvalidRecordError, match="non-empty query"):
        memory.search("ann", "  ")


def test_import_many_skips_restatements(memory: MemoryBackend) -> None:
    memory.remember("ann", "I am vegetarian")
    added = memory.remember_many(
        "ann", ["I am vegetarian", "My dog is called Rex", "my dog is called Rex.", "I live in Lyon"]
    )
    assert [i.text for i in added] == ["My dog is called Rex", "I live in Lyon"]
    assert len(memory.items("ann")) == 3


def test_import_that_supersedes_part_of_a_memory_stored_whole_keeps_the_rest(memory: MemoryBackend) -> None:
    memory.remember("ann", "My name is Ann and I'm allergic to nuts")
    memory.remember_many("ann", ["My name is Annabel", "I like jazz"])
    assert texts(memory) == ["I like jazz", "I'm allergic to nuts", "My name is Annabel"]


def test_an_import_line_restating_what_a_cut_left_is_not_stored_beside_it(memory: MemoryBackend) -> None:
    """On a LangGraph store the remainder of a memory an earlier line of the import cut a fact out of
    was unknown to the import: a later line restating it was inserted as a second current memory."""
    memory.remember_many(
        "ann", ["My name is Ann and I'm allergic to nuts", "My name is Annabel", "I'm allergic to nuts"]
    )
    assert texts(memory) == ["I'm allergic to nuts", "My name is Annabel"]


def test_import_that_supersedes_retires_the_old_fact(memory: MemoryBackend) -> None:
    memory.remember("ann", "I live in Lyon")
    memory.remember_many("ann", ["I moved to Hobart", "I am vegetarian"])
    assert texts(memory) == ["I am vegetarian", "I moved to Hobart"]
    assert {r.status for r in memory.list("ann")} == {MemoryStatus.ACTIVE, MemoryStatus.RETIRED}


def test_bad_input_is_refused_and_nothing_is_written(memory: MemoryBackend) -> None:
    with pytest.raises(InvalidRecordError, match="non-empty text"):
        memory.remember("ann", "   ")
    with pytest.raises(InvalidRecordError, match="user"):
        memory.remember("", "I am vegetarian")
    with pytest.raises(InvalidRecordError, match="non-empty text"):
        memory.remember_many("ann", ["I am vegetarian", ""])
    assert memory.items("ann") == []


def test_forgetting_deletes_the_stored_embeddings_of_every_text_the_memory_had(
    memory_log: tuple[MemoryBackend, EpisodeLog],
) -> None:
    import numpy as np

    from memabra.storage import EmbeddingTable

    memory, log = memory_log
    dog = memory.remember("ann", "My dog is called Rex")
    memory.update("ann", dog.id, "My dog is called Luna")
    cat = memory.remember("ann", "My cat is called Tom")
    table = EmbeddingTable(log.engine)
    texts = ["My dog is called Rex", "My dog is called Luna", "My cat is called Tom", "tool: weather"]
    for model in ("enc-a", "enc-b"):
        table.save(model, {t: np.ones(4, dtype=np.float32) for t in texts})

    memory.forget("ann", dog.id)

    for model in ("enc-a", "enc-b"):
        assert set(table.load(model, texts)) == {"My cat is called Tom", "tool: weather"}
    assert cat.id in {m.id for m in memory.list("ann")}
