"""Review of the admin's memory forms: the "why" box takes what the history keeps (a longer one was
accepted, then cut short in the history), and an edit refused because another edit landed first
comes back with its reason as well as its text."""

from __future__ import annotations

import html
import re

from starlette.testclient import TestClient

from memabra import MemoryStatus, SQLMemory
from memabra.storage import EpisodeLog

from .conftest import ClientFactory


def _form(client: TestClient, user: str, memory_id: str, form_id: str) -> tuple[dict[str, str], str]:
    page = client.get(f"/memories/item?user={user}&id={memory_id}").text
    form = page.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]
    fields = {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)}
    return fields, form


def test_a_why_the_history_would_cut_is_refused_and_the_box_says_how_long_one_may_be(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    memory = SQLMemory(log)
    veg = memory.remember("ann", "I'm vegetarian").id
    client = make_client()
    fields, form = _form(client, "ann", veg, "memory-retire-form")
    room = int(re.findall(r'name="reason" maxlength="(\d+)"', form)[0])
    prefix = "restored in the admin (operator token sign-in): "
    assert room == 200 - len(prefix)

    refused = client.post("/memories/retire", data={**fields, "reason": "y" * 190})
    assert refused.status_code == 400 and "keeps at most 200" in html.unescape(refused.text)
    assert memory.get("ann", veg).status is MemoryStatus.ACTIVE  # nothing written
    why = "z" * room
    assert client.post("/memories/retire", data={**fields, "reason": why}).status_code == 303
    assert memory.history("ann", veg)[-1].reason.endswith(why)  # kept whole


def test_an_edit_refused_for_a_newer_edit_keeps_the_reviewers_why(make_client: ClientFactory, log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    dog = memory.remember("ann", "My dog is called Rex").id
    client = make_client()
    fields, _ = _form(client, "ann", dog, "memory-edit-form")
    memory.update("ann", dog, "My dog is called Max")  # another reviewer's edit lands first
    stale = client.post(
        "/memories/update", data={**fields, "text": "My dog is called Rexy", "reason": "ticket 77: typo"}
    )
    page = html.unescape(stale.text)
    assert stale.status_code == 409 and "was changed after you opened it" in page
    assert 'value="ticket 77: typo"' in page.split('id="memory-edit-form"', 1)[1]
