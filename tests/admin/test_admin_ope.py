"""Offline-evaluation results on the policies page, as the log stores them."""

from __future__ import annotations

import json
import re

from starlette.testclient import TestClient

from memabra._records import OPEResult
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
    rows = re.findall(r"<tr [^>]*data-estimator[^>]*>(.*?)</tr>", section, re.S)
    assert len(rows) == len(stored)
    assert "bm25 baseline" in rows[0] and "[0.2100, 0.3900]" in rows[0] and "90%" in rows[0]
    assert "test-v3" in rows[1] and "[0.4400, 0.6000]" in section and "95%" in rows[1]
    assert 'id="chart-ope"' in page and "No offline evaluation yet" not in page
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', page, re.S).group(1))
    assert data["ope"]["labels"][0] == "test-v2 · dr" and data["ope"]["labels"][-1] == "bm25 baseline · ipw"
    assert sorted(data["ope"]["value"]) == sorted(r.value for r in stored)
    assert [0.44, 0.6] in data["ope"]["interval"]


def _ope_section(client: TestClient) -> str:
    return client.get("/policies").text.split('id="ope"', 1)[1].split("</section>", 1)[0]


def _row(section: str, estimator: str, policy: str) -> str:
    return next(
        row
        for row in re.findall(r"<tr [^>]*data-estimator[^>]*>.*?</tr>", section, re.S)
        if f'data-estimator="{estimator}"' in row and f"<td>{policy}</td>" in row
    )


def _chart(client: TestClient) -> dict[str, list[object]]:
    page = client.get("/policies").text
    data: dict[str, list[object]] = json.loads(re.search(r'id="chart-data">(.*?)</script>', page, re.S).group(1))["ope"]  # type: ignore[union-attr]
    return data


UNSUPPORTED = {
    "supported": False,
    "reason": "mean joint weight 0.0315 excludes 1: the log does not cover this target",
    "unreached_share": 0.99,
    "logging_value": 0.8824,
}


def test_an_unsupported_targets_other_rows_do_not_read_as_answers(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    # the demo's "active" run: the recommended cdr is unsupported (99% of the target's probability
    # out of reach) while dm, which weights nothing, passes its own check with a tight interval
    log.record_ope_results(
        [
            OPEResult("active", "cdr", 1.74, -1.9, 1.6, 190, details={**UNSUPPORTED, "recommended": True}),
            OPEResult(
                "active",
                "dm",
                0.925,
                0.871,
                0.980,
                190,
                details={**UNSUPPORTED, "recommended": False, "estimator_supported": True, "estimator_reason": ""},
            ),
        ]
    )
    section = _ope_section(client)
    dm = _row(section, "dm", "active")
    assert "ope-muted" in dm and "target unsupported" in dm and "99% of the target" in dm
    assert "badge-ok" not in dm and "supported</span>" in dm  # its own verdict, not shown as trustworthy
    cdr = _row(section, "cdr", "active")
    assert "ope-muted" not in cdr and "recommended" in cdr and "unsupported" in cdr
    assert "0.8824" in cdr and "cannot tell: the target is unsupported" in cdr
    chart = _chart(client)
    assert chart["labels"] == ["active · cdr", "active · dm"]
    assert chart["trusted"] == [False, False] and chart["recommended"] == [True, False]
    assert chart["logging_value"] == [0.8824, 0.8824]
    assert chart["note"] == ["recommended · target unsupported", "target unsupported: not an answer"]


def test_a_supported_recommendation_is_compared_with_the_logging_policy(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    target = {"supported": True, "reason": "", "logging_value": 0.40}
    log.record_ope_results(
        [
            OPEResult("better", "cdr", 0.52, 0.45, 0.60, 300, details={**target, "recommended": True}),
            OPEResult("tied", "cdr", 0.42, 0.30, 0.55, 300, details={**target, "recommended": True}),
            OPEResult("worse", "pi", 0.20, 0.10, 0.30, 300, details={**target, "recommended": True}),
            OPEResult(
                "better",
                "sips",
                0.5,
                0.4,
                0.6,
                300,
                details={**target, "recommended": False, "estimator_supported": True, "estimator_reason": ""},
            ),
        ]
    )
    section = _ope_section(client)
    assert "better: the whole interval is above the logging policy" in _row(section, "cdr", "better")
    assert "cannot tell: the interval contains the logging policy" in _row(section, "cdr", "tied")
    assert "worse: the whole interval is below the logging policy" in _row(section, "pi", "worse")
    sips = _row(section, "sips", "better")
    assert "badge badge-ok" in sips and "ope-muted" not in sips and "0.4000" in sips
    assert _chart(client)["trusted"] == [True, True, True, True]


def test_each_run_shows_the_data_window_it_read(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    window = {"first_decision_at": "2026-11-01T08:00:00+00:00", "last_decision_at": "2026-11-30T17:59:00+00:00"}
    restricted = {**window, "since": None, "until": "2026-12-01T00:00:00+00:00"}
    whole = {**window, "since": None, "until": None}
    log.record_ope_results(
        [
            OPEResult("until-run", "cdr", 0.5, 0.4, 0.6, 120, details={"recommended": True, "window": restricted}),
            OPEResult("whole-run", "cdr", 0.5, 0.4, 0.6, 190, details={"recommended": True, "window": whole}),
            OPEResult("old-run", "cdr", 0.5, 0.4, 0.6, 190, details={"recommended": True}),
        ]
    )
    section = _ope_section(client)
    until = _row(section, "cdr", "until-run")
    assert "2026-11-01 08:00:00 → 2026-11-30 17:59:00" in until and "restricted" in until
    assert "until 2026-12-01 00:00:00" in until and ">120<" in until
    assert "whole log" in _row(section, "cdr", "whole-run") and "restricted" not in _row(section, "cdr", "whole-run")
    assert "not recorded" in _row(section, "cdr", "old-run")
