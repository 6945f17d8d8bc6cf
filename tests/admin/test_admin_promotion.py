"""Promoting a snapshot says what offline evaluation says about it: its latest recommended estimate
against the logging policy, whether the log supports it, and whether it was saved with --force."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

from starlette.testclient import TestClient

from memabra import PolicySnapshot
from memabra._admin._promotion import promotion_check
from memabra._records import OPEResult
from memabra.storage import EpisodeLog

from .conftest import NOW, Seeded

REASON = "mean joint weight 0.181 [0.109, 0.252] excludes 1: the log does not cover this target"
# what `memabra train --from-log --force` stores with a snapshot whose evaluation was unsupported
FORCED_UNSUPPORTED: dict[str, Any] = {
    "verdict": f"forced: unsupported: {REASON}",
    "estimator": "cdr",
    "supported": False,
    "estimate": 1.1891,
    "ci_low": -1.9,
    "ci_high": 1.6,
    "logging_value": 1.2560,
    "improvement": None,
    "improvement_ci_low": None,
    "improvement_ci_high": None,
    "n_train": 446,
    "n_holdout": 111,
}


def _save_candidate(log: EpisodeLog, version: str, metrics: dict[str, Any]) -> None:
    created = NOW - timedelta(hours=1)
    log.save_snapshot(
        PolicySnapshot("test", version, b"\x04" * 512, parent="test-v2", created_at=created, metrics=metrics)
    )


def _snapshot_row(client: TestClient, version: str) -> str:
    snapshots = client.get("/policies").text.split('id="snapshots"', 1)[1].split("</section>", 1)[0]
    return snapshots.split(f'data-version="{version}"', 1)[1].split("</tr>", 1)[0]


def _confirmation(row: str) -> str:
    match = re.search(r'action="/policies/promote" class="inline" data-confirm="([^"]*)"', row)
    assert match, "the row has no promote form"
    return html.unescape(match.group(1))


def test_a_forced_unsupported_snapshot_says_so_next_to_promote_and_before_it(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    _save_candidate(log, "test-v4", FORCED_UNSUPPORTED)
    row = _snapshot_row(client, "test-v4")
    cell = row.split('class="promotion"', 1)[1]
    assert "1.189" in cell and "1.256" in cell  # the estimate and the logging policy's value
    assert ">unsupported</span>" in cell and ">forced</span>" in cell and "mean joint weight 0.181" in cell
    assert "btn-warn" in row
    confirm = _confirmation(row)
    assert confirm.startswith("Make test-v4 the active policy?")
    assert "cdr estimate 1.189 [-1.900, 1.600] against the logging policy's 1.256" in confirm
    assert f"Unsupported: {REASON}" in confirm
    assert "WARNING: its estimate is UNSUPPORTED" in confirm and "WARNING: it was FORCED" in confirm
    assert confirm.endswith("Promote it anyway?")


def test_the_latest_recommended_run_of_a_snapshot_is_what_promote_shows(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    _save_candidate(log, "test-v4", FORCED_UNSUPPORTED)
    verdict = {"supported": True, "reason": "", "logging_value": 0.40}

    def estimate(estimator: str, value: float, low: float, high: float, *, recommended: bool) -> OPEResult:
        details = verdict | {"recommended": recommended}
        return OPEResult(
            "test", estimator, value, low, high, 300, snapshot_version="test-v4", run_id="later", details=details
        )

    log.record_ope_results(
        [estimate("cdr", 0.52, 0.45, 0.60, recommended=True), estimate("dm", 0.9, 0.8, 1.0, recommended=False)]
    )
    row = _snapshot_row(client, "test-v4")
    confirm = _confirmation(row)
    assert "(run later of " in confirm and "cdr estimate 0.520 [0.450, 0.600]" in confirm
    assert "better: the whole interval is above the logging policy" in confirm
    assert "UNSUPPORTED" not in confirm and "WARNING: it was FORCED" in confirm  # forced stays forced
    assert ">supported</span>" in row and ">forced</span>" in row


def test_a_snapshot_nothing_evaluated_says_so(client: TestClient, seeded: Seeded) -> None:
    row = _snapshot_row(client, "test-v3")
    assert ">not evaluated</span>" in row and "btn-warn" not in row
    confirm = _confirmation(row)
    assert "WARNING: no offline evaluation of this snapshot is stored" in confirm


def test_a_snapshot_that_beat_the_logging_policy_is_promoted_without_a_warning() -> None:
    metrics = {
        "verdict": "beats logging policy",
        "estimator": "cdr",
        "supported": True,
        "estimate": 0.7,
        "ci_low": 0.65,
        "ci_high": 0.75,
        "logging_value": 0.5,
    }
    check = promotion_check("v9", metrics, [])
    assert check.supported is True and not check.forced and check.warnings == () and not check.concerning
    assert check.confirmation() == (
        "Make v9 the active policy?\n\nOffline evaluation (its training metrics): cdr estimate 0.700 [0.650, 0.750]"
        " against the logging policy's 0.500: better: the whole interval is above the logging policy."
    )


def test_a_snapshot_evaluated_before_many_later_runs_keeps_its_verdict(
    client: TestClient, seeded: Seeded, log: EpisodeLog
) -> None:
    # The page lists the newest runs only; the Promote column must not call a snapshot
    # "not evaluated" because later runs of other targets pushed its own run off that list.
    _save_candidate(log, "test-v4", {})
    details = {"supported": True, "reason": "", "logging_value": 0.40, "recommended": True}
    log.record_ope_results(
        [
            OPEResult(
                "test",
                "cdr",
                0.52,
                0.45,
                0.60,
                300,
                snapshot_version="test-v4",
                run_id="early",
                details=details,
                created_at=NOW - timedelta(days=3),
            )
        ]
    )
    later = [
        OPEResult(
            "bm25", f"est{i}", 0.3, 0.2, 0.4, 300, run_id=f"bm25-{i // 12}", created_at=NOW - timedelta(minutes=i)
        )
        for i in range(250)
    ]
    log.record_ope_results(later)
    row = _snapshot_row(client, "test-v4")
    assert ">not evaluated</span>" not in row and ">supported</span>" in row
    assert "cdr estimate 0.520 [0.450, 0.600]" in _confirmation(row)
