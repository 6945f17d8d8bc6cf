"""A write form sent twice (a double click, a reload that re-posts) does what it did once and says
so: the second send of the same memory edit is not reported as a conflict that lost the text."""

from __future__ import annotations

import html

from memabra import SQLMemory
from memabra._memory import MemoryAction
from memabra.storage import EpisodeLog

from .conftest import ClientFactory
from .test_admin_memories import Memories, _form, memories  # noqa: F401  (the fixture)


def test_the_same_memory_edit_sent_twice_is_saved_once_and_not_a_conflict(
    make_client: ClientFactory,
    memories: Memories,  # noqa: F811
    log: EpisodeLog,
) -> None:
    client = make_client()
    fields = {**_form(client, memories, memories.never, "memory-edit-form"), "text": "My cat is called Felix"}
    first = client.post("/memories/update", data=fields)
    assert first.status_code == 303
    second = client.post("/memories/update", data=fields)
    assert second.status_code == 303, html.unescape(second.text)
    assert second.headers["location"] == first.headers["location"]
    actions = [c.action for c in SQLMemory(log).history("ann", memories.never)]
    assert actions == [MemoryAction.CREATED, MemoryAction.UPDATED]
    # another text sent from the same stale form is still a conflict: nothing is overwritten
    other = client.post("/memories/update", data={**fields, "text": "My cat is called Max"})
    assert other.status_code == 409 and SQLMemory(log).get("ann", memories.never).text == "My cat is called Felix"
