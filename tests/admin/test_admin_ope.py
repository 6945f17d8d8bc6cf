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
    runs = _runs(section)
    assert len(runs) == len(stored)  # each estimate here was stored as a run of its own
    assert "bm25 baseline" in runs[0] and "[0.2100, 0.3900]" in runs[0] and "90%" in runs[0]
    assert "test-v3" in runs[1] and "[0.4400, 0.6000]" in section and "95%" in runs[1]
    assert 'id="chart-ope"' in page and "No offline evaluation yet" not in page
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', page, re.S).group(1))
    assert data["ope"]["labels"][0] == "test-v2 · dr" and data["ope"]["labels"][-1] == "bm25 baseline · ipw"
    assert sorted(data["ope"]["value"]) == sorted(r.value for r in stored)
    assert [0.44, 0.6] in data["ope"]["interval"]


def _ope_section(client: TestClient) -> str:
    return client.get("/policies").text.split('id="ope"', 1)[1].split("</section>", 1)[0]


def _runs(section: str) -> list[str]:
    """Each run's rows: its line, then its reason and every estimate folded under it."""
    return section.split('<tbody class="ope-run"')[1:]


def _run(section: str, policy: str) -> str:
    return next(run for run in _runs(section) if f'<td class="target">{policy}<' in run)


def _line(run: str) -> str:
    """The run's one line: its recommended estimate."""
    return run.split("</tr>", 1)[0]


def _estimate(run: str, estimator: str) -> str:
    """One estimator's row among the run's folded estimates."""
    return next(
        row
        for row in re.findall(r"<tr [^>]*data-estimator[^>]*>.*?</tr>", run, re.S)
        if f'data-estimator="{estimator}"' in row
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
            OPEResult(
                "active", "cdr", 1.74, -1.9, 1.6, 190, details={**UNSUPPORTED, "recommended": True}, run_id="run-a"
            ),
            OPEResult(
                "active",
                "dm",
                0.925,
                0.871,
                0.980,
                190,
                details={**UNSUPPORTED, "recommended": False, "estimator_supported": True, "estimator_reason": ""},
                run_id="run-a",
            ),
        ]
    )
    run = _run(_ope_section(client), "active")
    dm = _estimate(run, "dm")
    assert "ope-muted" in dm and "target unsupported" in dm and "99% of the target" in dm
    assert "badge-ok" not in dm and "supported</span>" in dm  # its own verdict, not shown as trustworthy
    cdr = _line(run)
    assert "ope-muted" not in cdr and "recommended" in cdr and "unsupported" in cdr
    assert "0.8824" in cdr and "cannot tell: the target is unsupported" in cdr
    assert "ope-muted" not in _estimate(run, "cdr")
    # the verdict's reason is on the page, not folded away with the other estimators
    assert UNSUPPORTED["reason"] in run.split("<details", 1)[0]
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
            OPEResult("better", "cdr", 0.52, 0.45, 0.60, 300, details={**target, "recommended": True}, run_id="b"),
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
                run_id="b",
            ),
        ]
    )
    section = _ope_section(client)
    assert "better: the whole interval is above the logging policy" in _line(_run(section, "better"))
    assert "cannot tell: the interval contains the logging policy" in _line(_run(section, "tied"))
    assert "worse: the whole interval is below the logging policy" in _line(_run(section, "worse"))
    sips = _estimate(_run(section, "better"), "sips")
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
    until = _line(_run(section, "until-run"))
    assert "2026-11-01 08:00:00 UTC</time> → " in until and "2026-11-30 17:59:00 UTC</time>" in until
    assert "restricted" in until
    assert "until " in until and "2026-12-01 00:00:00 UTC</time>" in until and ">120<" in until
    whole = _line(_run(section, "whole-run"))
    assert "whole log" in whole and "restricted" not in whole
    assert "not recorded" in _line(_run(section, "old-run"))


ESTIMATORS = ("sips", "snsips", "iips", "rips", "pi", "snpi", "dm", "dr", "idr", "cdr", "pi-dr")


def _full_run(policy: str, run_id: str, details: dict[str, object]) -> list[OPEResult]:
    """A run as `memabra ope log` stores it: every estimator, cdr recommended, the others muted."""
    return [
        OPEResult(
            policy,
            name,
            0.5 + i / 100,
            0.4,
            0.6 + i / 100,
            190,
            run_id=run_id,
            details={**details, "recommended": name == "cdr", "estimator_supported": True, "estimator_reason": ""},
        )
        for i, name in enumerate(ESTIMATORS)
    ]


def test_each_run_is_one_line_with_its_estimators_folded_under_it(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    log.record_ope_results(_full_run("hybrid", "run-h", UNSUPPORTED) + _full_run("bm25", "run-b", UNSUPPORTED))
    section = _ope_section(client)
    runs = _runs(section)
    assert len(runs) == 2 and section.count('class="ope-summary') == 2
    for run in runs:
        line, rest = run.split("</tr>", 1)
        assert "data-estimator" not in line and ">cdr <span" in line and "recommended" in line
        assert "0.8824" in line and ">unsupported</span>" in line
        # the verdict's reason under the line, every estimate behind one <details>
        reason, folded = rest.split('<details class="ope-estimates">', 1)
        assert UNSUPPORTED["reason"] in reason
        assert re.findall(r'data-estimator="([^"]+)"', folded) == ["cdr", *(e for e in ESTIMATORS if e != "cdr")]
        assert folded.count("ope-muted") == len(ESTIMATORS) - 1


def test_the_chart_axis_stops_at_the_rewards_range() -> None:
    from memabra._admin._ope_views import ope_chart, ope_rows

    supported = {"supported": True, "reason": "", "recommended": False}
    rows = ope_rows(
        [
            OPEResult("hybrid", "cdr", 0.8, 0.7, 0.9, 100, run_id="r", details={**supported, "recommended": True}),
            OPEResult("hybrid", "pi", 9.0, -0.5, 18.0, 100, run_id="r", details=supported),
            OPEResult("hybrid", "sips", -3.0, -6.0, 0.1, 100, run_id="r", details=supported),
        ]
    )
    chart = ope_chart(rows, (-1.9, 1.6))
    low, high = chart["axis"]
    assert -2.1 < low < -1.9 and 1.6 < high < 1.8  # the reward's range, with a margin
    assert chart["clipped_high"] == [False, True, False] and chart["clipped_low"] == [False, False, True]
    assert chart["interval"] == [[0.7, 0.9], [-0.5, high], [low, 0.1]]
    assert "interval [-0.500, 18.000] runs past the axis" in chart["note"][1]
    # within the range, the axis spans the data: narrow intervals stay readable
    narrow = ope_chart(ope_rows([OPEResult("hybrid", "cdr", 0.5, 0.45, 0.55, 100, details=supported)]), (-1.9, 1.6))
    assert narrow["axis"] == [0.446, 0.554] and narrow["clipped_high"] == [False]


def test_each_run_shows_the_reward_weights_it_scored_under(client: TestClient, seeded: Seeded, log: EpisodeLog) -> None:
    # a run re-scored with wc=0.8 beside one on the totals as logged and one stored before runs
    # recorded their weights: the page must not let them read as comparable
    target = {"supported": True, "reason": "", "logging_value": 0.40, "recommended": True}
    rescored = {"ws": 1.0, "wr": 0.35, "we": 0.3, "wc": 0.8, "wl": 0.15, "wx": 0.2, "wu": 0.25}
    log.record_ope_results(
        [
            OPEResult("rescored", "cdr", 0.5, 0.4, 0.6, 300, details={**target, "weights": rescored}, run_id="w"),
            OPEResult("logged", "cdr", 0.5, 0.4, 0.6, 300, details={**target, "weights": None}, run_id="l"),
            OPEResult("older", "cdr", 0.5, 0.4, 0.6, 300, details=target, run_id="o"),
        ]
    )
    section = _ope_section(client)
    assert "weights: ws=1 wr=0.35 we=0.3 wc=0.8 wl=0.15 wx=0.2 wu=0.25" in _line(_run(section, "rescored"))
    assert "weights: as logged" in _line(_run(section, "logged"))
    assert re.search(r"weights: <span[^>]*>not recorded</span>", _line(_run(section, "older")))
