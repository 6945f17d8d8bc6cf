"""Input a person (or a pasted link) can send that the log cannot hold: an offset past any integer
column, a NUL byte in an id or a search, an id longer than the log's ids. Each is answered (400, or
what the log holds under the value without the NUL), never a 500 and never a half-written erasure.
Runs on every backend: PostgreSQL refuses NUL bytes and over-long ids where SQLite stores them."""

from __future__ import annotations

import html
import re

import pytest

from memabra import MemoryStatus, SQLMemory
from memabra.storage import EpisodeLog

from .conftest import ClientFactory, csrf_of
from .test_admin_memories import Memories, seed_memories


@pytest.fixture
def memories(log: EpisodeLog) -> Memories:
    return seed_memories(log)


def _alert(page: str) -> str:
    match = re.search(r'(?:role="alert"[^>]*|class="error-message")>([^<]+)<', page)
    return html.unescape(match.group(1)) if match else ""


@pytest.mark.parametrize("offset", ["9223372036854775808", "99999999999999999999999", "1000000001"])
def test_a_memory_offset_past_any_page_is_refused_naming_it(
    make_client: ClientFactory, memories: Memories, offset: str
) -> None:
    response = make_client().get(f"/memories?user=ann&offset={offset}")
    assert response.status_code == 400
    assert "offset must be between 0 and 1,000,000,000" in _alert(response.text)


def test_a_nul_byte_in_a_memory_query_reads_as_the_value_without_it(
    make_client: ClientFactory, memories: Memories
) -> None:
    client = make_client()
    # the log stores ids without NUL bytes: "ann\0" names ann
    page = client.get("/memories?user=ann%00").text
    assert f'data-memory="{memories.helpful}"' in page and 'id="no-such-user"' not in page
    searched = client.get("/memories?user=ann&q=ch%00ess")
    assert searched.status_code == 200 and f'data-memory="{memories.unused}"' in searched.text
    assert client.get("/memories?q=a%00nn").status_code == 200
    item = client.get(f"/memories/item?user=ann%00&id={memories.helpful}%00")
    assert item.status_code == 200 and "I drink green tea" in item.text
    assert client.get("/deletions?user=ann%00").status_code == 200


def test_a_nul_byte_in_a_memory_write_is_dropped(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> None:
    client = make_client()
    token = csrf_of(client.get("/memories?user=ann").text)
    response = client.post(
        "/memories/retire", data={"csrf_token": token, "user": "ann\x00", "memory_id": memories.helpful + "\x00"}
    )
    assert response.status_code == 303
    assert SQLMemory(log).get("ann", memories.helpful).status is MemoryStatus.RETIRED


def test_erasing_a_user_named_with_a_nul_byte_finishes(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> None:
    client = make_client()
    token = csrf_of(client.get("/memories?user=ann").text)
    response = client.post("/erase", data={"csrf_token": token, "user": "ann\x00", "confirm": "ann\x00"})
    assert response.status_code == 303
    [entry] = log.deletion_history()
    assert entry.user_id == "ann" and entry.finished_at is not None and entry.memories_forgotten == 5
    assert SQLMemory(log).list("ann") == []


def test_erasing_a_user_id_longer_than_any_is_refused_before_anything_is_written(
    make_client: ClientFactory, memories: Memories, log: EpisodeLog
) -> None:
    client = make_client()
    token = csrf_of(client.get("/memories?user=ann").text)
    user = "u" * 201
    response = client.post("/erase", data={"csrf_token": token, "user": user, "confirm": user})
    assert response.status_code == 400
    assert "longer than 200 characters" in _alert(response.text)
    assert log.deletion_history() == []
