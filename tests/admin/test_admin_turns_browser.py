"""In Chromium: from the policies page's health figures to the unfinished turns, abandoning a lost
turn after its confirmation, and the breadcrumb from an episode back to the filtered list (the
browser fixtures and the skip rules are those of test_admin_browser.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memabra.storage import EpisodeLog

from .conftest import Seeded
from .test_admin_browser import _Watch, artifacts, browser, page, served, sign_in  # noqa: F401  (fixtures)
from .test_admin_turns import kept_turn

pytestmark = pytest.mark.browser


def test_a_lost_turn_is_abandoned_after_its_confirmation(
    page: Any,  # noqa: F811
    served: tuple[str, EpisodeLog, Seeded],  # noqa: F811
    artifacts: Path,  # noqa: F811
) -> None:
    _, log, _ = served
    kept = kept_turn("browser-lost", state="lost", user="dora")
    log.suspend_turn(kept)
    log.suspend_turn(kept_turn("browser-running", state="running", user="eve"))
    watch = _Watch(page, dialogs=False)
    sign_in(page)
    page.goto("/policies")
    page.click("#learning .alert-error a[href='/turns?lost=1']")
    page.wait_for_url("**/turns?lost=1")
    assert page.locator("tr[data-turn='browser-running']").count() == 0  # the lost ones only
    page.click("#turn-filter a[href='/turns']")
    page.wait_for_url("**/turns")
    lost = page.locator("tr[data-turn='browser-lost']")
    assert "lost" in lost.inner_text()
    assert page.locator("tr[data-turn='browser-running'] button").count() == 0
    page.screenshot(path=str(artifacts / "admin-turns.png"), full_page=True)
    confirmations: list[str] = []

    def accept(dialog: Any) -> None:
        confirmations.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url) if request.method == "POST" else None)
    lost.locator("button[type=submit]").dblclick()
    page.wait_for_url("**/turns?notice=turn-abandoned*")
    assert len(posts) == 1, posts  # sent once, however often it is clicked
    assert len(confirmations) == 1 and "dora" in confirmations[0]
    assert "Turn abandoned" in page.locator(".alert-ok").inner_text()
    page.click("#abandoned-episode a")
    page.wait_for_url(f"**/episodes/{kept.episode_id}")
    assert log.suspended_turn("browser-lost") is None
    assert watch.errors == []


def test_the_breadcrumb_goes_back_to_the_filtered_list(
    page: Any,  # noqa: F811
    served: tuple[str, EpisodeLog, Seeded],  # noqa: F811
) -> None:
    watch = _Watch(page)
    sign_in(page)
    page.goto("/episodes")
    page.fill("input[name=user]", "bob")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**/episodes?*user=bob*")
    listed = page.locator("#episode-table tbody tr").count()
    page.locator("#episode-table tbody td:first-child a").first.click()
    page.wait_for_url("**/episodes/*")
    page.click(".crumbs a:text-is('Episodes')")
    page.wait_for_url("**/episodes?*user=bob*")
    assert page.locator("input[name=user]").input_value() == "bob"
    assert page.locator("#episode-table tbody tr").count() == listed
    assert watch.errors == [] and watch.dialogs == []
