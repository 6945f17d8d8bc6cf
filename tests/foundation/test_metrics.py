"""``memabra status --prometheus FILE``: the status as Prometheus text (format 0.0.4) for
node_exporter's textfile collector: strict grammar, escaped labels, written atomically, and
``memabra_status_up 0`` (exit 1 as before) when the database cannot be read."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest
from runtime.learning_log import log_final
from sqlalchemy import update
from typer.testing import CliRunner

from memabra._cli import app
from memabra._cli._status import UNHEALTHY_EXIT
from memabra._health import health_problems
from memabra._metrics import status_metrics
from memabra._records import utcnow
from memabra.storage import EpisodeLog, LogStatus, PolicyStatus
from memabra.storage._learner import LeaseHolder
from memabra.storage._models import EpisodeRow

runner = CliRunner(env={"COLUMNS": "200"})

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
_VALUE = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|Inf)|NaN"
_HELP = re.compile(rf"# HELP ({_NAME}) (.*)")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (gauge|counter|histogram|summary|untyped)")
_SAMPLE = re.compile(rf"({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? ({_VALUE})")
_ONE_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"')


@dataclass(frozen=True)
class Family:
    kind: str
    help: str
    samples: dict[tuple[tuple[str, str], ...], float]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], text)


def parse_exposition(text: str) -> dict[str, Family]:
    """The text exposition format, strictly: every line HELP, TYPE or a sample; each family's HELP
    and TYPE once, before its samples, its samples together; no sample twice; a final newline."""
    assert text.endswith("\n") and not text.endswith("\n\n"), "the text ends with one newline"
    families: dict[str, Family] = {}
    current: str | None = None
    for line in text[:-1].split("\n"):
        if m := _HELP.fullmatch(line):
            assert m.group(1) not in families, f"{m.group(1)} described twice"
            current = m.group(1)
            families[current] = Family("", _unescape(m.group(2)), {})
        elif m := _TYPE.fullmatch(line):
            assert m.group(1) == current and not families[current].kind, f"TYPE out of place: {line!r}"
            families[current] = replace(families[current], kind=m.group(2))
        elif m := _SAMPLE.fullmatch(line):
            assert m.group(1) == current and families[current].kind, f"sample outside its family: {line!r}"
            labels = tuple((k, _unescape(v)) for k, v in _ONE_LABEL.findall(m.group(2) or ""))
            assert labels not in families[current].samples, f"sample twice: {line!r}"
            families[current].samples[labels] = float(m.group(3).replace("Inf", "inf"))
        else:
            raise AssertionError(f"not a line of the exposition format: {line!r}")
    for name, family in families.items():
        assert family.samples, f"{name} has no sample"
        assert family.kind != "counter" or name.endswith("_total"), f"counter {name} must end in _total"
    return families


def value(families: dict[str, Family], name: str, **labels: str) -> float:
    return families[name].samples[tuple(labels.items())]


def _status(url: str, out: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["status", "--db", url, "--prometheus", str(out), *args])
    return result.exit_code, result.output


def test_a_healthy_log_writes_every_figure_in_strict_exposition_format(migrated_url: str, tmp_path: Path) -> None:
    out = tmp_path / "memabra.prom"
    code, output = _status(migrated_url, out)
    assert code == 0, output
    families = parse_exposition(out.read_text())
    assert value(families, "memabra_status_up") == 1
    assert value(families, "memabra_status_healthy") == 1
    assert 0 < value(families, "memabra_status_duration_seconds") < 30
    assert value(families, "memabra_status_max_lag_seconds") == 900
    for check in ("feedback_windows", "learner", "deletions", "turns"):
        assert value(families, "memabra_health_problem", check=check) == 0
    backend = "sqlite" if migrated_url.startswith("sqlite") else "postgresql"
    (labels,) = families["memabra_log_info"].samples
    assert dict(labels)["backend"] == backend
    assert value(families, "memabra_schema_current") == 1
    for name in ("memabra_episodes", "memabra_rewards_unlearned", "memabra_turns_lost", "memabra_deletions_unfinished"):
        assert value(families, name) == 0
        assert families[name].kind == "gauge"


def test_a_reward_waiting_too_long_sets_its_check_and_exit_4(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 3)
        with log.engine.begin() as conn:
            conn.execute(update(EpisodeRow).values(finalized_at=utcnow() - timedelta(hours=2)))
    out = tmp_path / "memabra.prom"
    code, output = _status(migrated_url, out)
    assert code == UNHEALTHY_EXIT, output
    families = parse_exposition(out.read_text())
    assert value(families, "memabra_status_up") == 1 and value(families, "memabra_status_healthy") == 0
    assert value(families, "memabra_health_problem", check="learner") == 1
    assert value(families, "memabra_health_problem", check="feedback_windows") == 0
    assert value(families, "memabra_rewards_unlearned") == 3
    assert 7190 < value(families, "memabra_rewards_unlearned_oldest_age_seconds") < 7300


def test_policy_labels_are_escaped_and_each_policy_has_its_figures() -> None:
    now = utcnow()
    odd = 'we"ird\\po\nlicy'
    lease = LeaseHolder(odd, "worker-1", until=now + timedelta(seconds=30))
    policies = (
        PolicyStatus(odd, "v1", now - timedelta(hours=1), None, lease, 5, now - timedelta(hours=2), 2),
        PolicyStatus("plain", None, None, None, None, 0, None, 0),
    )
    state = LogStatus(now, "postgresql", "0014", 9, now, 1, 0, None, 5, now, policies, None)
    problems = health_problems(state)
    text = status_metrics(state, problems=problems, max_lag=timedelta(minutes=15), duration_s=0.01, checked_at=now)
    assert 'policy="we\\"ird\\\\po\\nlicy"' in text
    families = parse_exposition(text)
    assert value(families, "memabra_learner_backlog", policy=odd) == 5
    assert value(families, "memabra_learner_backlog_held_back", policy=odd) == 2
    assert value(families, "memabra_learner_backlog_oldest_age_seconds", policy=odd) == 7200
    assert value(families, "memabra_learner_lease_held", policy=odd) == 1
    assert value(families, "memabra_learner_lease_held", policy="plain") == 0
    assert value(families, "memabra_learner_learned_total", policy=odd) == 0
    assert families["memabra_learner_learned_total"].kind == "counter"
    assert value(families, "memabra_policy_active_snapshot_age_seconds", policy=odd) == 3600
    assert ("policy", "plain") not in {
        label for labels in families["memabra_policy_active_snapshot_age_seconds"].samples for label in labels
    }
    assert value(families, "memabra_health_problem", check="learner", policy=odd) == 1
    assert value(families, "memabra_health_problem", check="learner", policy="plain") == 0
    assert value(families, "memabra_postgres_oldest_transaction_age_seconds") == 0


def test_the_file_is_replaced_by_a_rename_of_a_complete_file_in_its_folder(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "textfile"  # the collector's folder: nothing else in it
    folder.mkdir()
    out = folder / "memabra.prom"
    out.write_text("earlier\n")
    real_replace = os.replace
    renames: list[tuple[str, str]] = []

    def spy(src: str, dst: str) -> None:
        if Path(dst) == out:
            renames.append((str(src), str(dst)))
            assert Path(src).parent == out.parent, "the temporary file is in the collector's folder"
            assert not Path(src).name.endswith(".prom"), (
                "the collector reads *.prom only: the temporary file is not one"
            )
            assert out.read_text() == "earlier\n", "the file is untouched until the rename"
            parse_exposition(Path(src).read_text())  # complete when it is renamed
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    code, output = _status(migrated_url, out)
    assert code == 0, output
    assert len(renames) == 1
    assert value(parse_exposition(out.read_text()), "memabra_status_up") == 1
    assert sorted(p.name for p in folder.iterdir()) == ["memabra.prom"]


def test_a_failed_write_leaves_the_earlier_file_whole(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "textfile"  # the collector's folder: nothing else in it
    folder.mkdir()
    out = folder / "memabra.prom"
    out.write_text("earlier\n")

    def full_disk(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    code, output = _status(migrated_url, out)
    assert code == 1 and "could not write" in output and "No space left on device" in output
    assert out.read_text() == "earlier\n"
    assert sorted(p.name for p in folder.iterdir()) == ["memabra.prom"]


def test_a_database_that_cannot_be_reached_writes_up_0_and_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "memabra.prom"
    out.write_text("memabra_status_up 1\n")  # an earlier run's: must not survive this one
    code, output = _status("postgresql+psycopg://root@127.0.0.1:1/nowhere", out, "--timeout", "10")
    assert code == 1, output
    assert "cannot connect to the database" in output
    families = parse_exposition(out.read_text())
    assert value(families, "memabra_status_up") == 0
    assert "memabra_status_healthy" not in families and "memabra_health_problem" not in families
    assert value(families, "memabra_status_duration_seconds") >= 0


def test_a_sqlite_file_gone_from_its_path_writes_up_0_and_exits_1(tmp_path: Path) -> None:
    """A log that was there and is gone (a volume not mounted, a file moved) is a check that could
    not run, not a usage error: the textfile and the JSON must not keep an earlier run's figures."""
    out, report = tmp_path / "memabra.prom", tmp_path / "status.json"
    out.write_text("memabra_status_up 1\n")  # an earlier run's: must not survive this one
    report.write_text('{"healthy": true}')
    gone, unmounted = tmp_path / "gone.db", tmp_path / "unmounted" / "memabra.db"
    for url, says in ((f"sqlite:///{gone}", f"no database at {gone}"), (f"sqlite:///{unmounted}", "does not exist")):
        code, output = _status(url, out, "--json", str(report))
        assert code == 1, output
        assert says in " ".join(output.split())
        assert value(parse_exposition(out.read_text()), "memabra_status_up") == 0
        assert '"healthy": false' in report.read_text()
        assert not gone.exists()


def test_an_unknown_policy_writes_up_0(migrated_url: str, tmp_path: Path) -> None:
    out = tmp_path / "memabra.prom"
    code, output = _status(migrated_url, out, "--policy", "nope")
    assert code == 1 and "--policy 'nope'" in output
    assert value(parse_exposition(out.read_text()), "memabra_status_up") == 0


def test_prometheus_to_stdout_alone_and_not_with_json_to_stdout(migrated_url: str) -> None:
    result = runner.invoke(app, ["status", "--db", migrated_url, "--prometheus", "-"])
    assert result.exit_code == 0, result.output
    assert value(parse_exposition(result.stdout), "memabra_status_up") == 1
    both = runner.invoke(app, ["status", "--db", migrated_url, "--prometheus", "-", "--json", "-"])
    assert both.exit_code == 2 and "both write to standard output" in both.output
