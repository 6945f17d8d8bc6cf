"""Promote's confirmation names the snapshot it replaces (the one Roll back will return to), as Roll
back's confirmation names the one it returns to."""

from __future__ import annotations

from starlette.testclient import TestClient

from memabra.storage import EpisodeLog

from .conftest import Seeded
from .test_admin_promotion import _confirmation, _snapshot_row


def test_promote_confirmation_names_the_active_snapshot_it_replaces(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    confirm = _confirmation(_snapshot_row(client, "test-v3"))
    assert confirm.startswith("Make test-v3 the active policy?\nIt replaces test-v2")
    assert "Roll back returns to test-v2" in confirm
    log.set_snapshot_status("test-v2", "retired")  # nothing active: nothing replaced
    confirm = _confirmation(_snapshot_row(client, "test-v3"))
    assert "It replaces" not in confirm
