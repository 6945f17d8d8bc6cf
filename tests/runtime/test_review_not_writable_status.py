"""Review of ``memabra status``'s writes check, as a probe meets it: a volume that is merely low (a
10 GB VM or a laptop with 800 MB free) warns without failing; a nearly full one fails; a check run
as root still sees a file nobody else may write; a folder whose space cannot be read is no
traceback; and PostgreSQL is read in one statement, so a transaction pooler (PgBouncer) cannot
answer the two reads from two server connections.

Each goes through the command line, patching only the standard library, so it reads the same
against any layout of the check's modules."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from memabra._cli import app
from memabra._cli._status import UNHEALTHY_EXIT
from memabra.storage import upgrade

runner = CliRunner(env={"COLUMNS": "200"})
GIB = 1 << 30
MIB = 1 << 20


def _status(url: str, *args: str) -> tuple[int, str, dict[str, Any]]:
    out = runner.invoke(app, ["status", "--db", url, "--json", "-", *args])
    assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    document = out.stdout[out.stdout.index("{") :]
    return out.exit_code, out.output, json.loads(document)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    folder = tmp_path / "logs"
    folder.mkdir()
    url = f"sqlite:///{folder / 'memabra.db'}"
    upgrade(url)
    yield url
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _volume(monkeypatch: pytest.MonkeyPatch, *, total: int, free: int) -> None:
    real = shutil.disk_usage

    def disk_usage(path: Any) -> Any:
        real(path)  # still fails where the folder is gone
        return shutil._ntuple_diskusage(total, total - free, free)  # type: ignore[attr-defined]

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)


@pytest.mark.parametrize(("total", "free"), [(10 * GIB, 800 * MIB), (500 * GIB, 800 * MIB)], ids=["vm", "laptop"])
def test_a_volume_running_low_warns_without_failing_the_check(
    total: int, free: int, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _volume(monkeypatch, total=total, free=free)
    code, output, document = _status(sqlite_url)
    assert code == 0, output  # a probe does not page anyone (or restart a pod) for this
    assert document["healthy"] is True and document["problems"] == []
    (warning,) = document["warnings"]
    assert warning["check"] == "writes" and "800.0 MiB free" in warning["message"]
    assert "running low" in warning["message"]
    assert document["writes"]["disk_low"] is True and document["writes"]["disk_critical"] is False
    assert "! writes (a warning, not a failure): " in output and "(low)" in output
    assert "✗" not in output


def test_a_volume_nearly_full_fails_the_check(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _volume(monkeypatch, total=10 * GIB, free=20 * MIB)
    code, output, document = _status(sqlite_url)
    assert code == UNHEALTHY_EXIT, output
    (problem,) = (p["message"] for p in document["problems"] if p["check"] == "writes")
    assert "20.0 MiB free of 10.0 GiB" in problem and "nearly full" in problem
    assert document["warnings"] == []  # the failure says it; no second line for the same volume
    assert document["writes"]["writable"] is True  # still taken, for now


def test_a_volume_whose_space_cannot_be_read_is_no_traceback(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_usage(_path: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    code, output, document = _status(sqlite_url)
    assert code == 0, output
    assert document["writes"]["disk_free_bytes"] is None and document["writes"]["file_writable"] is True


@pytest.mark.skipif(os.geteuid() != 0, reason="what a check run as root sees")
def test_as_root_a_file_nobody_else_may_write_fails_the_check(sqlite_url: str) -> None:
    """Root writes any file whatever its permissions, so asking the kernel whether this process
    may write says yes; an agent running as another user is refused all the same."""
    path = Path(make_url(sqlite_url).database or "")
    path.chmod(0o444)
    code, output, document = _status(sqlite_url)
    assert code == UNHEALTHY_EXIT, output
    assert document["writes"]["file_writable"] is False and document["writes"]["as_root"] is True
    (problem,) = (p["message"] for p in document["problems"] if p["check"] == "writes")
    assert f"the SQLite file {path}" in problem and "root, the user the agents are taken to run as" in problem
    path.chmod(0o644)  # its owner may write it: root's check passes
    assert _status(sqlite_url)[0] == 0


@pytest.fixture
def statements() -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    yield seen
    event.remove(Engine, "before_cursor_execute", record)


def test_postgresql_is_asked_in_one_statement(pg_schema_url: str, statements: list[str]) -> None:
    upgrade(pg_schema_url)
    statements.clear()
    code, output, document = _status(pg_schema_url)
    assert code == 0, output
    asked = [s for s in statements if "transaction_read_only" in s or "pg_is_in_recovery" in s]
    assert len(asked) == 1 and "pg_is_in_recovery" in asked[0] and "transaction_read_only" in asked[0], asked
    assert document["writes"]["in_recovery"] is False and document["writes"]["transaction_read_only"] is False


def test_postgresql_through_a_transaction_pooler(pooled_url: str) -> None:
    upgrade(pooled_url)
    code, output, document = _status(pooled_url)
    assert code == 0, output
    assert document["writes"]["writable"] is True and "writes    accepted" in output
