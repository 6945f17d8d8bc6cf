"""After a correction that names a memory, the admin's notice says whether that memory was
retired, and which: before, it only said "Feedback recorded; the episode's reward was recomputed",
whether the memory was retired, was no current memory of the user, or failed to retire after the
feedback was stored (where the operator has to act)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from memabra import MemoryStatus, SQLMemory
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, feedback_form
from .test_admin_retract_memory import _episode_offering


def _send(client: TestClient, episode_id: str, memory_id: str) -> str:
    fields = feedback_form(client, episode_id, "correction-form")
    response = client.post(f"/episodes/{episode_id}/feedback", data={**fields, "retract_memory": memory_id})
    assert response.status_code == 303
    location = response.headers["location"]
    assert "notice=feedback-stored" in location  # the reward's part of the notice is as it was
    return client.get(location).text


def test_the_notice_names_the_memory_retired(make_client: ClientFactory, log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    episode_id, memory_id = _episode_offering(log, memory)
    page = _send(make_client(), episode_id, memory_id)
    assert memory.get("ann", memory_id).status is MemoryStatus.RETIRED
    assert "the episode&#39;s reward was recomputed" in page
    assert f"Memory {memory_id} is retired by this correction: it is no longer recalled" in page


def test_the_notice_says_another_users_memory_was_not_retired(make_client: ClientFactory, log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    episode_id, _ = _episode_offering(log, memory)
    bobs = memory.remember("bob", "I live in Oslo")
    page = _send(make_client(), episode_id, bobs.id)
    assert memory.get("bob", bobs.id).status is MemoryStatus.ACTIVE
    assert f"Memory {bobs.id} was not retired: it is not a current memory of the episode&#39;s user" in page


def test_the_notice_says_to_send_again_when_retiring_failed(
    make_client: ClientFactory, log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = SQLMemory(log)
    episode_id, memory_id = _episode_offering(log, memory)

    def outage(*args: object, **kwargs: object) -> None:
        raise OperationalError("UPDATE memories", {}, Exception("server closed the connection"))

    monkeypatch.setattr(SQLMemory, "retire", outage)
    page = _send(make_client(), episode_id, memory_id)
    assert memory.get("ann", memory_id).status is MemoryStatus.ACTIVE
    assert f"Memory {memory_id} was not retired: retiring it failed after the feedback was stored" in page
    assert "submit the same form again" in page


def test_a_link_cannot_put_words_in_the_notice(make_client: ClientFactory, log: EpisodeLog) -> None:
    episode_id, _ = _episode_offering(log, SQLMemory(log))
    client = make_client()
    page = client.get(f"/episodes/{episode_id}?notice=feedback-stored:retired:<b>pay%20here</b>").text
    assert "pay here" not in page and "The memory it names is retired" in page
    page = client.get(f"/episodes/{episode_id}?notice=feedback-stored:hacked:x").text
    assert "hacked" not in page and "the episode&#39;s reward was recomputed" not in page
