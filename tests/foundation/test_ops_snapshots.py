"""Snapshot retention on a log nobody pruned for months: what ``memabra policies prune`` reads."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, event

from memabra._records import PolicySnapshot, utcnow
from memabra.storage import EpisodeLog


def test_prune_never_reads_the_models_it_weighs(log: EpisodeLog) -> None:
    """A snapshot's model is megabytes; pruning read every row whole, so 300 snapshots of 2 MB took
    660 MB and 10 s before deleting anything (74 MB and 0.4 s reading the columns the rules use)."""
    t0 = utcnow() - timedelta(hours=1)
    versions = [f"vw-{i}" for i in range(6)]
    for i, version in enumerate(versions):
        log.save_snapshot(
            PolicySnapshot(
                "vw",
                version,
                bytes([i]) * 64,
                parent=versions[i - 1] if i else None,
                created_at=t0 + timedelta(seconds=i),
            )
        )
    log.promote(versions[2])
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(log.engine, "before_cursor_execute", seen)
    try:
        dry = log.prune_snapshots(1, dry_run=True)
        done = log.prune_snapshots(1)
    finally:
        event.remove(log.engine, "before_cursor_execute", seen)
    # kept: the newest, and the active one with one generation above it
    assert dry.pruned == done.pruned == ("vw-0", "vw-3", "vw-4")
    assert set(done.kept) == {"vw-1", "vw-2", "vw-5"}
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "policy_snapshots" in s]
    assert reads and not [s for s in reads if "policy_snapshots.model" in s], reads
    assert {s.version for s in log.list_snapshots("vw")} == set(done.kept)


def test_policies_list_never_reads_the_models_it_lists(log: EpisodeLog, migrated_url: str, tmp_path: Any) -> None:
    """``memabra policies list`` loaded every model to print five columns: 690 MB and 8.6 s on 300
    snapshots of 2 MB."""
    import json
    import re

    from typer.testing import CliRunner

    from memabra._cli import app

    t0 = utcnow() - timedelta(hours=1)
    for i in range(3):
        log.save_snapshot(
            PolicySnapshot(
                "vw",
                f"vw-{i}",
                bytes([i]) * 64,
                parent=f"vw-{i - 1}" if i else None,
                created_at=t0 + timedelta(seconds=i),
            )
        )
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    out = tmp_path / "policies.json"
    event.listen(Engine, "before_cursor_execute", seen)
    try:
        listed = CliRunner().invoke(app, ["policies", "list", "--db", migrated_url, "--json", str(out)])
    finally:
        event.remove(Engine, "before_cursor_execute", seen)
    assert listed.exit_code == 0, listed.output
    assert [r["version"] for r in json.loads(out.read_text())] == ["vw-0", "vw-1", "vw-2"]
    whole = [s for s in statements if re.search(r"(?<!length\()policy_snapshots\.model\b", s)]
    assert statements and not whole, whole
