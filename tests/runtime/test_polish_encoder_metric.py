"""``memabra status`` fails on an embedding-model setting that names no usable model (the
``encoder`` problem), so its textfile needs a ``memabra_health_problem{check="encoder"}`` series:
without it ``memabra_status_healthy 0`` came with every check series at 0, and an alert on
``memabra_health_problem == 1`` never fired. Where the check did not run (the admin's ``/metrics``
reads no such setting) there is no such series."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from foundation.test_metrics import parse_exposition, value

from memabra._cli._status_encoder import ENCODER_CHECK
from memabra._health import DEFAULT_MAX_LAG, HealthProblem
from memabra._metrics import status_metrics
from memabra.storage import EpisodeLog, LogStatus, upgrade


def _state(tmp_path: Path) -> LogStatus:
    url = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        return log.status()


def test_a_failing_encoder_check_has_its_series_at_1(tmp_path: Path) -> None:
    state = _state(tmp_path)
    problem = HealthProblem(ENCODER_CHECK, "MEMABRA_EMBEDDING_MODEL names /models/gone, which is not a folder")
    text = status_metrics(
        state,
        problems=(problem,),
        max_lag=DEFAULT_MAX_LAG,
        duration_s=0.1,
        checked_at=state.checked_at,
        writes_checked=True,
        encoder_checked=True,
    )
    families = parse_exposition(text)
    assert value(families, "memabra_status_healthy") == 0
    failing = [labels for labels, v in families["memabra_health_problem"].samples.items() if v == 1]
    assert failing == [(("check", "encoder"),)]
    assert "encoder" in families["memabra_health_problem"].help


def test_a_passing_encoder_check_says_0_and_none_is_there_where_it_did_not_run(tmp_path: Path) -> None:
    state = _state(tmp_path)
    common: dict[str, Any] = {"max_lag": DEFAULT_MAX_LAG, "duration_s": 0.1, "checked_at": state.checked_at}
    checked = parse_exposition(status_metrics(state, encoder_checked=True, **common))
    assert value(checked, "memabra_health_problem", check="encoder") == 0
    assert 'check="encoder"' not in status_metrics(state, writes_checked=True, **common)
