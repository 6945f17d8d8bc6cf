"""``memabra status`` on a database that cannot take writes: a PostgreSQL server whose transactions
are read-only (a hot standby's refusal, made here with ``default_transaction_read_only`` in the URL's
options), a SQLite file or folder its writers cannot write, a volume nearly full. Each fails the
``writes`` check (exit 4) naming the cause and what to do, in the tables and in ``--json`` (new
keys beside the old ones); a volume merely low is a warning (exit 0); a database that takes writes
passes it, and the stored vectors are counted per encoder key."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

import memabra._health as health
import memabra._write_check as write_check
from memabra._cli import app
from memabra._cli._status import UNHEALTHY_EXIT
from memabra._write_check import write_problems, write_state
from memabra.storage import EmbeddingTable, make_engine, upgrade

runner = CliRunner(env={"COLUMNS": "200"})


def _status(url: str, *args: str) -> tuple[int, str, dict[str, Any]]:
    out = runner.invoke(app, ["status", "--db", url, "--json", "-", *args])
    document = out.stdout[out.stdout.index("{") :]
    return out.exit_code, out.output, json.loads(document)


def _writes_problems(document: dict[str, Any]) -> list[str]:
    return [p["message"] for p in document["problems"] if p["check"] == "writes"]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    folder = tmp_path / "logs"
    folder.mkdir()
    url = f"sqlite:///{folder / 'memabra.db'}"
    upgrade(url)
    yield url
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_a_log_that_takes_writes_passes_and_says_so(migrated_url: str) -> None:
    code, output, document = _status(migrated_url)
    assert code == 0, output
    writes = document["writes"]
    assert writes["writable"] is True and writes["disk_low"] is False
    assert document["status"]["episodes"] == 0  # the old keys stay
    if writes["backend"] == "postgresql":
        assert writes["in_recovery"] is False and writes["transaction_read_only"] is False
    else:
        assert writes["file_writable"] is True and writes["folder_writable"] is True
        assert writes["disk_free_bytes"] > 0 and writes["low_disk_free_bytes"] == write_check.LOW_DISK_FREE_BYTES
        assert "free on its volume" in output
    assert "writes    accepted" in output and "the database takes writes" in output


def test_read_only_postgresql_transactions_fail_the_writes_check(pg_schema_url: str) -> None:
    upgrade(pg_schema_url)
    url = make_url(pg_schema_url)
    options = f"{url.query.get('options', '')} -cdefault_transaction_read_only=on".strip()
    read_only = url.update_query_dict({"options": options}).render_as_string(hide_password=False)
    code, output, document = _status(read_only)
    assert code == UNHEALTHY_EXIT, output
    assert document["healthy"] is False
    writes = document["writes"]
    assert writes["transaction_read_only"] is True and writes["in_recovery"] is False
    assert writes["writable"] is False
    (problem,) = _writes_problems(document)
    assert "transactions are read-only (default_transaction_read_only" in problem
    assert "writes    refused: transactions are read-only" in output
    assert "✗ writes: " in output


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_sqlite_file_or_folder_its_writers_cannot_write_fails_the_writes_check(what: str, sqlite_url: str) -> None:
    """Whoever runs the check: as root, which the permission bits do not stop, the file's owner
    is who they are read for (tests/runtime/test_review_not_writable_status.py)."""
    path = Path(make_url(sqlite_url).database or "")
    (path if what == "file" else path.parent).chmod(0o555)
    code, output, document = _status(sqlite_url)
    assert code == UNHEALTHY_EXIT, output
    writes = document["writes"]
    assert writes[f"{what}_writable"] is False and writes["writable"] is False
    (problem,) = _writes_problems(document)
    assert f"{'the SQLite file' if what == 'file' else 'the folder of'} {path}" in problem
    assert "cannot be written by" in problem
    assert "cannot write " + ("the file" if what == "file" else "its folder") in output


def test_a_nearly_full_volume_fails_the_writes_check_before_writes_are_refused(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = Path(make_url(sqlite_url).database or "").parent
    # the volume's real free space, under thresholds set just above it
    above = shutil.disk_usage(folder).free + (1 << 30)
    monkeypatch.setattr(write_check, "LOW_DISK_FREE_BYTES", above)
    monkeypatch.setattr(write_check, "CRITICAL_DISK_FREE_BYTES", above)
    code, output, document = _status(sqlite_url)
    assert code == UNHEALTHY_EXIT, output
    writes = document["writes"]
    assert writes["disk_critical"] is True and writes["writable"] is True  # still taken, for now
    (problem,) = _writes_problems(document)
    assert "nearly full: free space now" in problem
    assert "(nearly full)" in output


def test_a_query_only_sqlite_connection_is_read_as_refusing_writes(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    event.listen(engine, "connect", lambda conn, _record: conn.execute("PRAGMA query_only=ON"))
    state = write_state(engine)
    engine.dispose()
    assert state.query_only is True and state.writable is False
    assert "PRAGMA query_only" in write_problems(state)[0].message


def test_stored_vectors_are_counted_per_encoder_key_up_to_a_cap(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(migrated_url)
    vector = np.ones(3, dtype=np.float32)
    EmbeddingTable(engine).save("bge-small@1f2e", {"a": vector, "b": vector, "c": vector})
    EmbeddingTable(engine).save("minilm@9a8b", {"a": vector})
    engine.dispose()
    code, output, document = _status(migrated_url)
    assert code == 0, output
    assert document["embeddings"] == [
        {"model": "bge-small@1f2e", "vectors": 3, "capped": False},
        {"model": "minilm@9a8b", "vectors": 1, "capped": False},
    ]
    assert "vectors   bge-small@1f2e 3, minilm@9a8b 1" in output
    monkeypatch.setattr(health, "EMBEDDINGS_COUNT_CAP", 2)
    document = _status(migrated_url)[2]
    assert document["embeddings"][0] == {"model": "bge-small@1f2e", "vectors": 2, "capped": True}
    assert _status(migrated_url, "--exact")[2]["embeddings"][0]["vectors"] == 3


def test_a_file_uri_opening_the_log_read_only_reads_refused_in_the_status_line(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    code, output, document = _status(f"sqlite:///file:{path}?mode=ro&uri=true")
    assert code == UNHEALTHY_EXIT and document["writes"]["uri_read_only"] is True
    assert "writes    refused: the file: URL opens it read-only" in output  # not "accepted" beside the problem
