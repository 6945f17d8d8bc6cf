"""In Chromium: a reviewer signs in and finds no write control on an episode or the policies page
(the browser fixtures and the skip rules are those of test_admin_browser.py; this module serves
an app with a reviewer credential besides the operator token)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memabra.storage import EpisodeLog

from .conftest import TOKEN, Seeded, migrated_database, record_ope, seed_log
from .test_admin_browser import _Server, _Watch, artifacts, browser, greedy_by_score, page  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser

REVIEWER_PASSWORD = "product people look, never touch"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, EpisodeLog, Seeded]]:
    from memabra._admin import create_app

    with migrated_database("sqlite", tmp_path_factory.mktemp("roles")) as url, EpisodeLog(url) as log:
        seeded = seed_log(log)
        record_ope(log)
        app = create_app(log, token=TOKEN, reviewer_password=REVIEWER_PASSWORD, current_policy=greedy_by_score)
        with _Server(app) as server:
            yield server.url, log, seeded


def _write_controls(page: Any) -> list[str]:  # noqa: F811
    """The submit buttons of every POST form on the page but signing out."""
    return page.locator(
        "form[method=post]:not([action='/logout']) button, form[method=post] input[type=submit]"
    ).all_inner_texts()  # type: ignore[no-any-return]


def test_a_reviewer_finds_no_write_buttons(
    page: Any,  # noqa: F811
    served: tuple[str, EpisodeLog, Seeded],
    artifacts: Path,  # noqa: F811
) -> None:
    _, log, seeded = served
    watch = _Watch(page)
    page.goto("/episodes")
    page.fill("#secret", REVIEWER_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/episodes")
    assert page.locator("#role-badge").inner_text() == "reviewer"

    target = seeded.episodes[16]  # open, not final: an operator gets both feedback forms here
    page.goto(f"/episodes/{target}")
    assert page.locator("article.decision").first.is_visible()  # the review itself is all there
    assert _write_controls(page) == []
    assert page.locator("#correction-form, #rating-form, #delete-episode").count() == 0
    assert "Signed in as a reviewer: feedback cannot be recorded here." in page.locator("#no-writes").inner_text()
    page.screenshot(path=str(artifacts / "admin-reviewer-episode.png"), full_page=True)

    page.goto("/policies")
    assert page.locator("tr[data-version='test-v3']").is_visible()
    assert _write_controls(page) == []
    assert page.get_by_role("button", name="Promote").count() == 0
    assert page.get_by_role("button", name="Roll back").count() == 0
    page.screenshot(path=str(artifacts / "admin-reviewer-policies.png"), full_page=True)

    # still signed in, and signing out still works
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/login?notice=signed-out")
    assert log.get_snapshot("test-v3").status == "candidate"
    # the same pages signed in as an operator do have them (the check above can see buttons)
    page.fill("#secret", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url("**/episodes")
    page.goto(f"/episodes/{target}")
    assert {"Delete episode", "Record correction", "Record rating"} <= set(_write_controls(page))
    page.goto("/policies")
    assert "Promote" in _write_controls(page)
    assert watch.dialogs == [] and watch.errors == []
