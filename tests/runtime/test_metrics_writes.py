"""``memabra status --prometheus``'s writes check: ``memabra_health_problem{check="writes"}`` is
there on every successful read, 1 when the database cannot take writes (what makes ``memabra
status`` exit 4, so ``memabra_status_healthy 0`` is never left without a failing series), 0 when it
can, and its help names it. Where the check did not run (the admin's ``/metrics``) there is no such
series, rather than a 0 claiming a check nobody made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from foundation.test_metrics import parse_exposition, value
from typer.testing import CliRunner

from memabra._cli import app
from memabra._cli._status import UNHEALTHY_EXIT
from memabra._health import DEFAULT_MAX_LAG
from memabra._metrics import status_metrics
from memabra.storage import EpisodeLog, upgrade

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    logs = tmp_path / "logs"
    logs.mkdir()
    upgrade(f"sqlite:///{logs / 'memabra.db'}")
    yield logs
    logs.chmod(0o755)


def _metrics(folder: Path, out: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["status", "--db", f"sqlite:///{folder / 'memabra.db'}", "--prometheus", str(out)])
    return result.exit_code, result.output


def test_a_database_that_takes_writes_has_its_writes_series_at_0(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "memabra.prom"
    code, output = _metrics(folder, out)
    assert code == 0, output
    families = parse_exposition(out.read_text())
    assert value(families, "memabra_health_problem", check="writes") == 0
    assert "writes" in families["memabra_health_problem"].help


def test_a_database_that_refuses_writes_has_its_writes_series_at_1(folder: Path, tmp_path: Path) -> None:
    folder.chmod(0o555)  # SQLite cannot create its -wal, -shm or journal files there
    out = tmp_path / "memabra.prom"
    code, output = _metrics(folder, out)
    assert code == UNHEALTHY_EXIT, output
    families = parse_exposition(out.read_text())
    assert value(families, "memabra_health_problem", check="writes") == 1
    assert value(families, "memabra_status_healthy") == 0
    failing = [labels for labels, v in families["memabra_health_problem"].samples.items() if v == 1]
    assert failing == [(("check", "writes"),)]


def test_no_writes_series_where_the_check_did_not_run(folder: Path) -> None:
    with EpisodeLog(f"sqlite:///{folder / 'memabra.db'}") as log:
        state = log.status()
    text = status_metrics(state, max_lag=DEFAULT_MAX_LAG, duration_s=0.1, checked_at=state.checked_at)
    assert 'check="turns"' in text and 'check="writes"' not in text
