"""In Chromium: a write form is sent once however often its button is clicked, and a confirmation
is asked once (the browser fixtures and the skip rules are those of test_admin_browser.py)."""

from __future__ import annotations

from typing import Any

import pytest

from memabra import SQLMemory
from memabra._memory import MemoryAction
from memabra.storage import EpisodeLog

from .conftest import Seeded
from .test_admin_browser import _Watch, browser, page, served, sign_in  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser


def test_a_double_click_sends_a_memory_edit_once(page: Any, served: tuple[str, EpisodeLog, Seeded]) -> None:  # noqa: F811
    _, log, _ = served
    memory = SQLMemory(log)
    record = memory.remember("erin", "My bike is blue")
    watch = _Watch(page, dialogs=False)
    sign_in(page)
    page.goto(f"/memories/item?user=erin&id={record.id}")
    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url) if request.method == "POST" else None)
    confirmations: list[str] = []

    def accept(dialog: Any) -> None:
        confirmations.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.fill("#memory-new-text", "My bike is green")
    page.dblclick("#memory-edit-form button[type=submit]")
    page.wait_for_url("**/memories/item?*notice=memory-updated*")
    assert len(posts) == 1, posts
    assert len(confirmations) == 1
    assert page.locator("#memory-text").inner_text() == "My bike is green"
    actions = [c.action for c in memory.history("erin", record.id)]
    assert actions == [MemoryAction.CREATED, MemoryAction.UPDATED]
    assert watch.errors == []
