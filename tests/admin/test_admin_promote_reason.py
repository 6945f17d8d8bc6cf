"""The policies page's Promote and Roll back take an optional reason, kept in the audit trail as
``memabra policies promote --reason`` keeps it; promoting the snapshot already active reads as
done, not as an error."""

from __future__ import annotations

import html

from starlette.testclient import TestClient
from typer.testing import CliRunner

from memabra._cli._app import app
from memabra.storage import MAX_AUDIT_TEXT, EpisodeLog
from memabra.storage._snapshot_audit import HISTORY_KEY, status_history

from .conftest import Seeded, csrf_of


def _row(page: str, version: str) -> str:
    return html.unescape(page).split(f'data-version="{version}"', 1)[1].split("</tr>", 1)[0]


def _reasons(log: EpisodeLog, version: str) -> list[tuple[str, str]]:
    return [(h.action, h.reason) for h in status_history(log.get_snapshot(version).metrics)]


def test_promote_and_roll_back_keep_the_reason_given_on_the_page(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    page = client.get("/policies").text
    for version in ("test-v3", "test-v2"):  # Promote of a candidate, Roll back of the active one
        assert f'name="reason" class="reason" maxlength="{MAX_AUDIT_TEXT}"' in _row(page, version)
    token = csrf_of(page)
    fields = {"csrf_token": token, "version": "test-v3", "replaces": "test-v2", "reason": "canary passed"}
    assert client.post("/policies/promote", data=fields).status_code == 303
    assert _reasons(log, "test-v3") == [("promoted", "canary passed")]
    assert _reasons(log, "test-v2") == [("retired", "canary passed")]
    page = client.get("/policies").text
    assert "“canary passed”" in _row(page, "test-v3")

    rollback = {"csrf_token": token, "version": "test-v3", "reason": "p95 latency"}
    assert client.post("/policies/rollback", data=rollback).status_code == 303
    assert _reasons(log, "test-v3")[-1] == ("rolled back", "p95 latency")
    assert _reasons(log, "test-v2")[-1] == ("re-activated", "p95 latency")
    # no reason given: an empty one, as the CLI without --reason
    assert client.post("/policies/promote", data={"csrf_token": token, "version": "test-v1"}).status_code == 303
    assert _reasons(log, "test-v1") == [("promoted", "")]


def test_a_reason_is_cut_and_cleaned_as_the_cli_keeps_it(
    client: TestClient, seeded: Seeded, log: EpisodeLog, migrated_url: str
) -> None:
    reason = "  rollout é " + "w" * 300
    token = csrf_of(client.get("/policies").text)
    sent = {"csrf_token": token, "version": "test-v3", "replaces": "test-v2", "reason": reason.replace("é", "é\x00")}
    assert client.post("/policies/promote", data=sent).status_code == 303
    cli = CliRunner().invoke(app, ["policies", "promote", "test-v1", "--db", migrated_url, "--reason", reason])
    assert cli.exit_code == 0, cli.output
    (action, from_page), _retired_by_the_cli = _reasons(log, "test-v3")
    assert action == "promoted"
    assert from_page == _reasons(log, "test-v1")[-1][1] == reason[:MAX_AUDIT_TEXT]


def test_promoting_the_active_snapshot_reads_as_already_active(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    token = csrf_of(client.get("/policies").text)
    for replaces in ("", "test-v2"):
        fields = {"csrf_token": token, "version": "test-v2", "replaces": replaces, "reason": "again"}
        response = client.post("/policies/promote", data=fields)
        assert response.status_code == 303, response.text
        page = html.unescape(client.get(response.headers["location"]).text)
        assert "test-v2 is already the active snapshot of policy test: nothing changed." in page
    for version in ("test-v1", "test-v2", "test-v3"):
        assert HISTORY_KEY not in log.get_snapshot(version).metrics
    assert [log.get_snapshot(v).status for v in ("test-v1", "test-v2", "test-v3")] == ["retired", "active", "candidate"]
    # a page that showed another snapshot active is still refused: its confirmation is no longer true
    stale = {"csrf_token": token, "version": "test-v2", "replaces": "test-v1"}
    assert client.post("/policies/promote", data=stale).status_code == 409
