"""Promote and roll back leave an audit trail: who (the signed-in principal) and when, in each
touched snapshot's metrics, written in the same transaction as the status change, and shown."""

from __future__ import annotations

import html

from starlette.testclient import TestClient

from memabra.storage import EpisodeLog
from memabra.storage._snapshot_audit import HISTORY_KEY, status_history

from .conftest import PASSWORD, TOKEN, ClientFactory, Seeded, csrf_of, sign_in


def _history(log: EpisodeLog, version: str) -> list[tuple[str, str, str]]:
    return [(h.action, h.by, h.note) for h in status_history(log.get_snapshot(version).metrics)]


def test_promote_and_roll_back_record_who_and_when(make_client: ClientFactory, seeded: Seeded, log: EpisodeLog) -> None:
    log.update_snapshot_metrics("test-v3", {"ope_value": 0.5})
    client = make_client(signed_in=False, password=PASSWORD)
    assert sign_in(client, PASSWORD).status_code == 303
    token = csrf_of(client.get("/policies").text)
    assert client.post("/policies/promote", data={"csrf_token": token, "version": "test-v3"}).status_code == 303
    assert _history(log, "test-v3") == [("promoted", "operator password sign-in", "")]
    assert _history(log, "test-v2") == [("retired", "operator password sign-in", "test-v3 promoted")]
    (entry,) = status_history(log.get_snapshot("test-v3").metrics)
    assert entry.client == "testclient" and entry.at.tzinfo is not None
    # the snapshot's own metrics are kept beside the trail
    assert log.get_snapshot("test-v3").metrics["ope_value"] == 0.5

    bearer = make_client(signed_in=False)
    response = bearer.post(
        "/policies/rollback", data={"version": "test-v3"}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 303
    assert [log.get_snapshot(v).status for v in ("test-v2", "test-v3")] == ["active", "retired"]
    assert _history(log, "test-v3")[-1] == ("rolled back", "operator bearer token", "test-v2 re-activated")
    assert _history(log, "test-v2")[-1] == ("re-activated", "operator bearer token", "rollback of test-v3")

    page = html.unescape(client.get("/policies").text)
    row = page.split('data-version="test-v3"', 1)[1].split("</tr>", 1)[0]
    assert "rolled back by operator bearer token" in row and "promoted by operator password sign-in" in row
    assert "history (2)" in row


def test_a_refused_change_writes_no_audit_entry(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    token = csrf_of(client.get("/policies").text)
    response = client.post("/policies/promote", data={"csrf_token": token, "version": "test-v2", "replaces": "test-v1"})
    assert response.status_code == 409 and "test-v2 is active now" in response.text
    response = client.post("/policies/rollback", data={"csrf_token": token, "version": "test-v3"})
    assert response.status_code == 409 and "not active" in response.text
    for version in ("test-v1", "test-v2", "test-v3"):
        assert HISTORY_KEY not in log.get_snapshot(version).metrics
    assert [log.get_snapshot(v).status for v in ("test-v1", "test-v2", "test-v3")] == ["retired", "active", "candidate"]


def test_a_token_sign_in_is_named_as_such(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    token = csrf_of(client.get("/policies").text)
    client.post("/policies/promote", data={"csrf_token": token, "version": "test-v1"})
    assert _history(log, "test-v1") == [("promoted", "operator token sign-in", "")]
