"""Promote and Roll back from a browser whose script did not run (blocked by policy, not loaded yet):
the click changes nothing and gets a page that asks first, naming exactly what will change (the
snapshot made active, the one it replaces, the evaluation's warnings, the reason typed); its button
sends the same fields, CSRF token included, and the change is recorded with who made it, as the
CLI's is. A script's post (no ``confirmed`` field) is not asked, as before."""

from __future__ import annotations

import html
import re

from starlette.testclient import TestClient

from memabra.storage import EpisodeLog
from memabra.storage._snapshot_audit import status_history

from .conftest import Seeded, csrf_of


def _form_fields(page: str, action: str, version: str) -> dict[str, str]:
    """The hidden and text fields of the form posting to ``action`` for ``version``, as sent."""
    for match in re.finditer(rf'<form method="post" action="{re.escape(action)}".*?</form>', page, re.S):
        form = match.group(0)
        fields = {
            html.unescape(name): html.unescape(value)
            for name, value in re.findall(r'<input type="(?:hidden|text)" name="([^"]+)"[^>]*?value="([^"]*)"', form)
        }
        if fields.get("version") == version:
            return fields
    raise AssertionError(f"no {action} form for {version}")


def _confirm_fields(page: str) -> tuple[str, dict[str, str]]:
    form = re.search(
        r'<section class="card" id="confirm">.*?<form method="post" action="([^"]+)"(.*?)</form>', page, re.S
    )
    assert form, page[:2000]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(2)))
    return form.group(1), {k: html.unescape(v) for k, v in fields.items()}


def test_promote_without_the_script_asks_on_a_page_naming_what_changes(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    fields = _form_fields(client.get("/policies").text, "/policies/promote", "test-v3")
    assert fields["confirmed"] == ""  # the script sets it to "yes" once its dialog was answered
    fields["reason"] = "v2 answers badly since 02:10"
    asked = client.post("/policies/promote", data=fields)
    assert asked.status_code == 200
    question = html.unescape(asked.text.split('id="confirm-question">', 1)[1].split("</p>", 1)[0])
    assert question.startswith("Make test-v3 the active policy?\nIt replaces test-v2")
    assert "Roll back returns to test-v2" in question
    assert "“v2 answers badly since 02:10”" in question
    assert "Nothing has changed yet" in asked.text
    assert log.get_snapshot("test-v2").status == "active" and log.get_snapshot("test-v3").status != "active"

    target, confirmed = _confirm_fields(asked.text)
    assert target == "/policies/promote" and confirmed["confirmed"] == "yes"
    assert confirmed["csrf_token"] == csrf_of(asked.text)
    done = client.post(target, data=confirmed)
    assert done.status_code == 303 and "notice=promoted" in done.headers["location"]
    assert log.get_snapshot("test-v3").status == "active"
    (entry,) = status_history(log.get_snapshot("test-v3").metrics)
    assert entry.action == "promoted" and entry.by.startswith("operator") and entry.reason == fields["reason"]


def test_roll_back_without_the_script_asks_naming_the_snapshot_it_returns_to(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    token = csrf_of(client.get("/policies").text)
    assert client.post("/policies/promote", data={"csrf_token": token, "version": "test-v3"}).status_code == 303
    fields = _form_fields(client.get("/policies").text, "/policies/rollback", "test-v3")
    asked = client.post("/policies/rollback", data=fields)
    assert asked.status_code == 200
    assert "Roll back test-v3? test-v2 becomes active again." in asked.text
    assert log.get_snapshot("test-v3").status == "active"  # nothing changed yet
    target, confirmed = _confirm_fields(asked.text)
    assert client.post(target, data=confirmed).status_code == 303
    assert log.get_snapshot("test-v2").status == "active" and log.get_snapshot("test-v3").status == "retired"
    assert status_history(log.get_snapshot("test-v3").metrics)[-1].action == "rolled back"


def test_the_confirmation_page_still_needs_the_csrf_token(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    fields = _form_fields(client.get("/policies").text, "/policies/promote", "test-v3")
    _, confirmed = _confirm_fields(client.post("/policies/promote", data=fields).text)
    confirmed["csrf_token"] = "forged"
    assert client.post("/policies/promote", data=confirmed).status_code == 403
    assert log.get_snapshot("test-v2").status == "active"
