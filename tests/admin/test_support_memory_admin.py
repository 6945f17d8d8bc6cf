"""A support engineer fixing "your assistant thinks I live in Hobart" in the admin view: an edit
never leaves two current values of one subject, and each change keeps who made it and why."""

from __future__ import annotations

import html
import re

from starlette.testclient import TestClient

from memabra import MemoryStatus, SQLMemory
from memabra.storage import EpisodeLog

from .conftest import ClientFactory


def _form(client: TestClient, user: str, memory_id: str, form_id: str) -> dict[str, str]:
    page = client.get(f"/memories/item?user={user}&id={memory_id}").text
    form = page.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]
    return {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)}


def test_an_edit_that_contradicts_a_current_memory_is_refused_until_the_reviewer_says_what_goes(
    make_client: ClientFactory, log: EpisodeLog
) -> None:
    memory = SQLMemory(log)
    hobart = memory.remember("ann", "I live in Hobart").id
    plan = memory.remember("ann", "I'm planning to move to Oslo").id  # a plan: Hobart stays current
    rex = memory.remember("ann", "My dog is called Rex").id
    client = make_client()
    fields = _form(client, "ann", plan, "memory-edit-form")
    edit = {**fields, "text": "I live in Oslo", "reason": "ticket 4182: user moved to Oslo"}

    refused = client.post("/memories/update", data=edit)
    page = html.unescape(refused.text)
    assert refused.status_code == 409 and "contradicts the current" in page and hobart in page
    assert 'id="memory-edit-replace"' in page and "ticket 4182: user moved to Oslo" in page  # the draft's why kept
    assert memory.get("ann", plan).text == "I'm planning to move to Oslo"  # nothing written
    assert memory.get("ann", hobart).status is MemoryStatus.ACTIVE

    saved = client.post("/memories/update", data={**edit, "replace": "on"})
    assert saved.status_code == 303, saved.text
    assert {r.text for r in memory.list("ann", include_retired=False)} == {"I live in Oslo", "My dog is called Rex"}
    retired = memory.get("ann", hobart)
    assert retired.status is MemoryStatus.RETIRED and retired.superseded_by == plan
    edited = memory.history("ann", plan)[-1]
    assert edited.old_text == "I'm planning to move to Oslo" and edited.new_text == "I live in Oslo"
    assert edited.reason == "edited in the admin (operator token sign-in): ticket 4182: user moved to Oslo"
    assert memory.get("ann", rex).status is MemoryStatus.ACTIVE  # nothing else of the user's lost


def test_retire_and_restore_keep_why_beside_who(make_client: ClientFactory, log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    veg = memory.remember("ann", "I'm vegetarian").id
    client = make_client()
    fields = _form(client, "ann", veg, "memory-retire-form")
    why = {**fields, "reason": "  ticket 4182:\n user never said this "}
    assert client.post("/memories/retire", data=why).status_code == 303
    assert memory.history("ann", veg)[-1].reason == (
        "retired in the admin (operator token sign-in): ticket 4182: user never said this"
    )
    page = html.unescape(client.get(f"/memories/item?user=ann&id={veg}").text)
    assert "ticket 4182: user never said this" in page.split('id="memory-history"', 1)[1]

    fields = _form(client, "ann", veg, "memory-restore-form")
    too_long = client.post("/memories/restore", data={**fields, "reason": "x" * 201})
    assert too_long.status_code == 400 and "keeps at most 200" in html.unescape(too_long.text)
    assert memory.get("ann", veg).status is MemoryStatus.RETIRED  # refused before anything was written
    assert client.post("/memories/restore", data=fields).status_code == 303  # the why may be left out
    assert memory.history("ann", veg)[-1].reason == "restored in the admin (operator token sign-in)"
