"""Offline-evaluation results on the policies page, as the log stores them."""

from __future__ import annotations

import json
import re

from starlette.testclient import TestClient

from memabra.storage import AdminQueries, EpisodeLog

from .conftest import Seeded, record_ope


def test_policies_page_without_offline_evaluation(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/policies").text
    assert 'id="no-ope"' in page and "No offline evaluation yet." in page
    assert 'id="chart-ope"' not in page


def test_policies_page_shows_offline_evaluation(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    stored = record_ope(log)
    of_v3 = AdminQueries(log).ope_results("test-v3")
    assert sorted(of_v3, key=lambda r: r.estimator) == [r for r in stored if r.snapshot_version == "test-v3"][::-1]
    page = client.get("/policies").text
    section = page.split('id="ope"', 1)[1].split("</section>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</tr>", section, re.S)
    assert len(rows) == len(stored)
    assert "bm25 baseline" in rows[0] and "[0.2100, 0.3900]" in rows[0] and "90%" in rows[0]
    assert "test-v3" in rows[1] and "[0.4400, 0.6000]" in section and "95%" in rows[1]
    assert 'id="chart-ope"' in page and "No offline evaluation yet" not in page
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', page, re.S).group(1))
    assert data["ope"]["labels"][0] == "test-v2 · dr" and data["ope"]["labels"][-1] == "bm25 baseline · ipw"
    assert sorted(data["ope"]["value"]) == sorted(r.value for r in stored)
    assert [0.44, 0.6] in data["ope"]["interval"]
