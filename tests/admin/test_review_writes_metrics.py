"""The admin's ``/metrics`` runs the ``writes`` check ``memabra status`` runs: a database that
refuses writes fails ``memabra_health_problem{check="writes"}`` on a scrape too, not only in
``memabra status --prometheus``'s file."""

from __future__ import annotations

import pytest
from foundation.test_metrics import parse_exposition, value

from memabra._admin import _metrics_page
from memabra._write_check import WriteState

from .conftest import TOKEN, ClientFactory, Seeded

BEARER = {"authorization": f"Bearer {TOKEN}"}


def test_a_scrape_has_the_writes_series_at_0_while_the_database_takes_writes(
    make_client: ClientFactory, seeded: Seeded
) -> None:
    families = parse_exposition(make_client(signed_in=False).get("/metrics", headers=BEARER).text)
    assert value(families, "memabra_health_problem", check="writes") == 0
    assert value(families, "memabra_status_healthy") == 1


def test_a_scrape_fails_the_writes_check_where_the_database_refuses_writes(
    make_client: ClientFactory, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusing = WriteState("sqlite", query_only=True)
    monkeypatch.setattr(_metrics_page, "write_state", lambda _engine: refusing)
    response = make_client(signed_in=False).get("/metrics", headers=BEARER)
    assert response.status_code == 200, response.text
    families = parse_exposition(response.text)
    assert value(families, "memabra_health_problem", check="writes") == 1
    assert value(families, "memabra_status_healthy") == 0
    failing = [labels for labels, v in families["memabra_health_problem"].samples.items() if v == 1]
    assert failing == [(("check", "writes"),)]
