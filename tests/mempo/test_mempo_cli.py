"""``memabra mempo score`` against a stand-in episode log (the log's MemPO methods are the lead's)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memabra.evals.mempo import RoutingDecisionItem, RoutingDecisionScore

from .conftest import capital_items

pytest.importorskip("torch", reason="the MemPO scorer needs the mempo extra (torch)")

import memabra._cli._mempo as cli  # noqa: E402

runner = CliRunner(env={"COLUMNS": "200"})


class StandInLog:
    opened: list[str | None] = []
    since: list[datetime | None] = []
    stored: list[RoutingDecisionScore] = []
    items: list[RoutingDecisionItem] = []

    def __init__(self, url: str | None) -> None:
        StandInLog.opened.append(url)

    def __enter__(self) -> StandInLog:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def mempo_items(self, *, since: datetime | None = None) -> list[RoutingDecisionItem]:
        StandInLog.since.append(since)
        return StandInLog.items

    def store_mempo_scores(self, results: Sequence[RoutingDecisionScore]) -> None:
        StandInLog.stored.extend(results)


@pytest.fixture
def stand_in_log(monkeypatch: pytest.MonkeyPatch) -> type[StandInLog]:
    monkeypatch.setattr(cli, "EpisodeLog", StandInLog)
    StandInLog.opened, StandInLog.since, StandInLog.stored = [], [], []
    StandInLog.items = [item for _, item in capital_items()]
    return StandInLog


def test_score_stores_one_result_per_decision_and_reports_throughput(trained_model_dir: Path, stand_in_log: type[StandInLog]) -> None:
    options = ["--db", "sqlite://", "--since", "2025-01-02", "--batch-size", "3", "--chunk-size", "3", "--device", "cpu"]
    result = runner.invoke(cli.mempo_app, ["--model", str(trained_model_dir), *options])
    assert result.exit_code == 0, result.output
    assert stand_in_log.opened == ["sqlite://"]
    assert stand_in_log.since == [datetime(2025, 1, 2, tzinfo=timezone.utc)]
    assert [score.id for score in stand_in_log.stored] == [item.id for item in stand_in_log.items]
    assert all(score.reward == -1 for score in stand_in_log.stored)
    assert "0 selections as good as all candidates (+1), 4 worse (-1)" in result.output
    assert "tokens/s" in result.output


def test_nothing_to_score_loads_no_model(tmp_path: Path, stand_in_log: type[StandInLog]) -> None:
    stand_in_log.items = []
    result = runner.invoke(cli.mempo_app, ["--model", str(tmp_path / "absent"), "--db", "sqlite://"])
    assert result.exit_code == 0 and "no decisions" in result.output


def test_a_missing_model_is_a_one_line_error(tmp_path: Path, stand_in_log: type[StandInLog]) -> None:
    result = runner.invoke(cli.mempo_app, ["--model", str(tmp_path), "--db", "sqlite://"])
    assert result.exit_code == 1
    assert "config.json is missing" in result.output


def test_a_bad_since_names_the_option(tmp_path: Path, stand_in_log: type[StandInLog]) -> None:
    result = runner.invoke(cli.mempo_app, ["--model", str(tmp_path), "--since", "yesterday"])
    assert result.exit_code == 1 and "--since" in result.output
