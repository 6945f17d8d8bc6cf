"""A Promote clicked on a page loaded before another operator changed the active snapshot is
refused: its confirmation named the snapshot it replaces (and that Roll back returns to), which is
no longer true."""

from __future__ import annotations

import html

from starlette.testclient import TestClient

from memabra.storage import EpisodeLog, SnapshotAudit
from memabra.storage._snapshot_audit import HISTORY_KEY

from .conftest import Seeded, csrf_of


def test_a_promote_from_a_stale_page_is_refused(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    page = client.get("/policies").text
    token = csrf_of(page)
    row = html.unescape(page).split('data-version="test-v3"', 1)[1].split("</tr>", 1)[0]
    assert 'name="replaces" value="test-v2"' in row  # what the confirmation says it replaces
    SnapshotAudit(log).promote("test-v1", by="another operator")  # lands after the page loaded
    response = client.post("/policies/promote", data={"csrf_token": token, "version": "test-v3", "replaces": "test-v2"})
    assert response.status_code == 409
    assert "test-v1 is active now" in html.unescape(response.text)
    assert [log.get_snapshot(v).status for v in ("test-v1", "test-v2", "test-v3")] == ["active", "retired", "candidate"]
    assert HISTORY_KEY not in log.get_snapshot("test-v3").metrics
    # reloaded, the page names the snapshot active now and the promote goes through
    fresh = client.post("/policies/promote", data={"csrf_token": token, "version": "test-v3", "replaces": "test-v1"})
    assert fresh.status_code == 303
    assert log.get_snapshot("test-v3").status == "active"


def test_a_promote_from_a_page_where_none_was_active_is_refused_once_another_landed(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    """The form said "replaces nothing" (an empty field): a promote that landed since is a
    conflict too, not silently retired by this one."""
    log.set_snapshot_status("test-v2", "retired")
    page = client.get("/policies").text
    token = csrf_of(page)
    row = html.unescape(page).split('data-version="test-v3"', 1)[1].split("</tr>", 1)[0]
    assert 'name="replaces" value=""' in row
    SnapshotAudit(log).promote("test-v1", by="another operator")  # lands after the page loaded
    form = {"csrf_token": token, "version": "test-v3", "replaces": "", "confirmed": "yes"}
    response = client.post("/policies/promote", data=form)
    assert response.status_code == 409
    assert "test-v1 is active now" in html.unescape(response.text)
    assert [log.get_snapshot(v).status for v in ("test-v1", "test-v3")] == ["active", "candidate"]
    # the same click, made when nothing was active, goes through; clicked twice, the second is "already active"
    log.set_snapshot_status("test-v1", "retired")
    assert client.post("/policies/promote", data=form).status_code == 303
    again = client.post("/policies/promote", data=form, follow_redirects=False)
    assert again.status_code == 303 and "already-active" in again.headers["location"]
    assert log.get_snapshot("test-v3").status == "active"
