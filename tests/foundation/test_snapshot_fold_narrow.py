"""The status window folds its versions into snapshots reading only the snapshots they can fold
into (``snapshot_index_for``), and must answer exactly as the index over every snapshot does.

Generated lineages hold what makes that hard: roots that are updates of other snapshots, one count
spelled "+7" and "+07", names with a ``~2`` suffix or other text after a ``+``, versions that grew
from no snapshot, roots holding LIKE's wildcards, and counts whose order as text is not their order
as numbers ("+9" sorts after "+10")."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, insert, select, text
from sqlalchemy.orm import Session

from memabra.storage import EpisodeLog, SnapshotIndex
from memabra.storage import _policy_versions as policy_versions
from memabra.storage._models import PolicySnapshotRow
from memabra.storage._policy_versions import snapshot_index_for

ROOTS = ("cfg", "c%g", "c_g", "c\\g", "lin-71c5", "é", "a", "ab", "cfg~2")
SEEDS = range(12)


def _count_spelling(rng: random.Random, n: int) -> str:
    return ("0" * rng.choice((1, 1, 2)) if rng.random() < 0.15 else "") + str(n)


def _lineage(rng: random.Random) -> tuple[set[str], list[str]]:
    """Snapshot versions and the versions a window logged, for one generated log."""
    snapshots: set[str] = set()
    for root in rng.sample(ROOTS, rng.randint(2, len(ROOTS))):
        if rng.random() < 0.3:
            snapshots.add(root)
        top = rng.choice((15, 120, 1_500))
        for n in rng.sample(range(top), rng.randint(0, 12)):
            snapshots.add(f"{root}+{_count_spelling(rng, n)}")
    # roots that are updates of snapshots (a router restored from one), a "~2" model trained apart,
    # and names sorted among a root's updates that are none of its updates
    for base in rng.sample(sorted(snapshots), min(3, len(snapshots))):
        for n in rng.sample(range(40), rng.randint(1, 4)):
            snapshots.add(f"{base}+{_count_spelling(rng, n)}")
        snapshots.add(f"{base}~2")
        snapshots.update((f"{base}x", f"{base}+1x", f"{base}+5~2", f"{base}+1+2"))
    roots = sorted({*ROOTS, *snapshots})
    window: list[str] = []
    for _ in range(25):
        root = rng.choice(roots)
        window.append(f"{root}+{_count_spelling(rng, rng.choice((0, 3, 9, 10, 99, 100, 1_000, 1_499, 20_000)))}")
    window += [rng.choice(roots), "nosnap+4", "a+b+3", "cfg+5~2+3", "c%g+%+1", "c_+7", "cfg+"]
    return snapshots, window


def _write_snapshots(log: EpisodeLog, versions: set[str]) -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [
        {
            "version": version,
            "policy": "linear",
            "parent": None,
            "model": b"m",
            "learner_args": {},
            "metrics": {},
            "status": "candidate",
            "created_at": at + timedelta(seconds=i),
            "previous_active": None,
        }
        for i, version in enumerate(sorted(versions))
    ]
    with Session(log.engine) as s, s.begin():
        s.execute(text("DELETE FROM policy_snapshots"))
        if rows:
            s.execute(insert(PolicySnapshotRow), rows)


def _assert_same_fold(log: EpisodeLog, window: list[str]) -> None:
    with Session(log.engine) as s, s.begin():
        everything = SnapshotIndex(s.scalars(select(PolicySnapshotRow.version)).all())
        narrowed = snapshot_index_for(s, window)
        alone = {v: snapshot_index_for(s, [v]) for v in window}
    for v in window:
        expected = (everything.group(v), everything.snapshot_of(v))
        assert (narrowed.group(v), narrowed.snapshot_of(v)) == expected, v
        assert (alone[v].group(v), alone[v].snapshot_of(v)) == expected, v


@pytest.fixture
def collate_c(log: EpisodeLog) -> Iterator[None]:
    """The PostgreSQL fold as on a database whose collation does not order like bytes."""
    policy_versions._BYTE_ORDERED[log.engine] = False
    yield
    policy_versions._BYTE_ORDERED.pop(log.engine, None)


def _fold_on_generated_lineages(log: EpisodeLog) -> None:
    for seed in SEEDS:
        snapshots, window = _lineage(random.Random(seed))
        _write_snapshots(log, snapshots)
        _assert_same_fold(log, window)


def test_the_narrowed_fold_matches_the_fold_over_every_snapshot(log: EpisodeLog) -> None:
    _fold_on_generated_lineages(log)


@pytest.mark.usefixtures("collate_c")
def test_the_narrowed_fold_matches_under_collate_c(log: EpisodeLog) -> None:
    if log.engine.dialect.name != "postgresql":
        pytest.skip('the COLLATE "C" reads are PostgreSQL\'s')
    _fold_on_generated_lineages(log)


def test_a_numeric_order_unlike_the_text_order_finds_the_latest_snapshot(log: EpisodeLog) -> None:
    _write_snapshots(log, {"r+9", "r+10", "r+99", "r+07", "r+7", "r+100x", "r+95~2", "r+1000"})
    window = ["r+9", "r+10", "r+98", "r+99", "r+999", "r+8", "r+6", "r+100"]
    _assert_same_fold(log, window)
    with Session(log.engine) as s, s.begin():
        index = snapshot_index_for(s, window)
    assert [index.group(v) for v in window] == ["r+9", "r+10", "r+10", "r+99", "r+99", "r+07", "r", "r+99"]


def test_it_reads_the_snapshots_it_needs_not_every_one(log: EpisodeLog) -> None:
    _write_snapshots(log, {f"lin+{n}" for n in range(0, 3_000, 10)} | {"other+5"})
    read: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        read.append(statement)

    window = [f"lin+{n}" for n in range(2_950, 2_995)]
    with Session(log.engine) as s, s.begin():
        s.scalar(text("SELECT 1"))  # the connection (and PostgreSQL's collation check) before counting
        snapshot_index_for(s, ["lin+1"])
        event.listen(log.engine, "after_cursor_execute", count)
        try:
            index = snapshot_index_for(s, window)
        finally:
            event.remove(log.engine, "after_cursor_execute", count)
    assert [index.group(v) for v in ("lin+2950", "lin+2959", "lin+2994")] == ["lin+2950", "lin+2950", "lin+2990"]
    # the latest snapshot at or below the window's first version, those up to its last, and the
    # spellings with a leading zero ("0" is one): 7 of 301
    assert sorted(index._versions) == ["lin+0", *(f"lin+{n}" for n in range(2_950, 3_000, 10))]
    # one exact read, the leading zeros, the counts the window spans, the latest below it
    assert len(read) == 4, read


def test_a_postgresql_database_ordering_like_bytes_lets_the_primary_key_serve_the_ranges(log: EpisodeLog) -> None:
    if log.engine.dialect.name != "postgresql":
        pytest.skip("collations are PostgreSQL's")
    with Session(log.engine) as s, s.begin():
        collation = s.scalar(text("SELECT datcollate FROM pg_database WHERE datname = current_database()"))
        ordered = policy_versions._pg_byte_ordered(s)
    assert ordered is (str(collation).lower() in ("c", "posix", "c.utf8", "c.utf-8"))


def test_a_column_in_a_numeric_collation_is_read_under_collate_c(log: EpisodeLog) -> None:
    if log.engine.dialect.name != "postgresql":
        pytest.skip("collations are PostgreSQL's")
    with Session(log.engine) as s, s.begin():
        if s.scalar(text("SELECT count(*) FROM pg_collation WHERE collprovider = 'i'")) == 0:
            pytest.skip("this PostgreSQL has no ICU collations")
        # numbers by value ("r+07" after "r+1"): ranges over the column's own order would miss some
        s.execute(text("CREATE COLLATION numbers_by_value (provider = icu, locale = 'und-u-kn-true')"))
        s.execute(text("ALTER TABLE policy_snapshots ALTER COLUMN version TYPE varchar(100) COLLATE numbers_by_value"))
        assert s.scalar(text("SELECT 'r+07' > 'r+1' COLLATE numbers_by_value")) is True
        assert policy_versions._pg_byte_ordered(s) is False
    policy_versions._BYTE_ORDERED.pop(log.engine, None)
    try:
        _write_snapshots(log, {"r+9", "r+10", "r+99", "r+07", "r+7", "r-1", "r,5", "r+5~2", "r+1+2"})
        _assert_same_fold(log, ["r+9", "r+10", "r+98", "r+99", "r+999", "r+8", "r+6", "r+5~2+1", "r+1+2+4"])
        _fold_on_generated_lineages(log)
    finally:
        policy_versions._BYTE_ORDERED.pop(log.engine, None)
