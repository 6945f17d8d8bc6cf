"""Listings a DBA runs against a log of millions: a page reads its page and stops.

``memories list`` reads the page's rows (not every memory of the user) through the index of
revision 0022, newest first, with a cursor to the next page; ``--json`` and ``--all`` stream every
row a batch at a time. ``episodes list``: a first page that holds every match is its own count (a
rare ``--search`` term no longer reads the log twice), ``--all`` streams, and ``--snapshot`` sends
the versions it served as one parameter, not one per version. The tests count rows loaded and
statements or parameters sent, never time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, insert, text
from typer.testing import CliRunner

from memabra._cli import app
from memabra.storage import EpisodeFilter, EpisodeLog, make_engine
from memabra.storage._models import EpisodeRow, PolicySnapshotRow, RegistryRow, table_of

runner = CliRunner(env={"COLUMNS": "200"})
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _seed_memories(engine: Engine, n: int, owner: str = "ann") -> None:
    rows = [
        dict(kind="memory", owner=owner, id=f"mem:{j:08d}", name=f"mem:{j:08d}", text=f"fact {j}", body=None,
             tokens=2, source="user", metadata={}, created_at=T0 + timedelta(seconds=j),
             updated_at=T0 + timedelta(seconds=j), last_chosen_at=None, times_chosen=0, times_used=0,
             deleted_at=None, retired_at=None, superseded_by=None)
        for j in range(n)
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(table_of(RegistryRow)), rows)


def _seed_episodes(engine: Engine, n: int, *, version: Any = lambda i: f"linear-x+{i}") -> None:
    rows = []
    for i in range(n):
        at = T0 + timedelta(seconds=i)
        rows.append(
            dict(id=f"{i:032x}", user_id="ann", thread_id="t", turn=0, query=f"question {i}" + (" zanzibar" if i == 3 else ""),
                 answer="a", created_at=at, feedback_due_at=at, finalized_at=at, policy_version=version(i), kinds="",
                 reward_total=0.5, corrected=False, used_ids=[], metadata={})
        )  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(table_of(EpisodeRow)), rows)


@contextmanager
def _loaded(model: type) -> Iterator[list[int]]:
    """How many rows of ``model`` the ORM built while the block ran."""
    seen = [0]

    def count(target: Any, context: Any) -> None:
        seen[0] += 1

    event.listen(model, "load", count)
    try:
        yield seen
    finally:
        event.remove(model, "load", count)


@contextmanager
def _statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    sent: list[tuple[str, Any]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", before)


def _ids(output: str) -> list[str]:
    return [word for word in output.split() if word.startswith("mem:")]


def test_a_memories_page_reads_its_rows_not_the_users_whole_set(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    _seed_memories(engine, 250)
    engine.dispose()
    with _loaded(RegistryRow) as loaded:
        page = runner.invoke(app, ["memories", "list", "--user", "ann", "--db", migrated_url, "--limit", "10"])
    assert page.exit_code == 0, page.output
    assert loaded[0] <= 11  # the page and one more: the old listing built all 250
    assert _ids(page.output) == [f"mem:{j:08d}" for j in range(249, 239, -1)]  # newest first
    assert "10 of 250 memories shown; 240 more: --limit N or --all" in page.output
    cursor = page.output.split("next page: --cursor ")[1].split()[0]
    with _loaded(RegistryRow) as loaded:
        older = runner.invoke(
            app, ["memories", "list", "--user", "ann", "--db", migrated_url, "--limit", "10", "--cursor", cursor]
        )
    assert older.exit_code == 0, older.output
    assert loaded[0] <= 11
    assert _ids(older.output) == [f"mem:{j:08d}" for j in range(239, 229, -1)]


def test_memories_json_and_all_stream_every_row(migrated_url: str, tmp_path: Path) -> None:
    from memabra._cli._listing_output import TABLE_BATCH

    engine = make_engine(migrated_url)
    _seed_memories(engine, TABLE_BATCH + 30)
    engine.dispose()
    out = tmp_path / "all.json"
    args = ["memories", "list", "--user", "ann", "--db", migrated_url]
    with _loaded(RegistryRow) as loaded:
        every = runner.invoke(app, [*args, "--all", "--json", str(out)])
    assert every.exit_code == 0, every.output
    rows = json.loads(out.read_text())
    assert [r["id"] for r in rows] == [f"mem:{j:08d}" for j in range(TABLE_BATCH + 29, -1, -1)]
    assert len(_ids(every.output)) == TABLE_BATCH + 30 and f"{TABLE_BATCH + 30:,} memories" in every.output
    assert loaded[0] == 2 * (TABLE_BATCH + 30)  # each row once for the file, once for the tables
    # the file is what writing the whole list at once writes, byte for byte
    assert out.read_text() == json.dumps(rows, indent=2) + "\n"


def test_memory_pages_use_the_index_and_stop(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    _seed_memories(engine, 300)
    page = (
        "SELECT * FROM registry WHERE kind = 'memory' AND owner = 'ann' AND deleted_at IS NULL "
        "ORDER BY created_at DESC, id DESC LIMIT 11"
    )
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            plan = " ".join(str(row[-1]) for row in conn.execute(text(f"EXPLAIN QUERY PLAN {page}")))
            assert "ix_registry_owner_kind_created_at_id" in plan and "TEMP B-TREE" not in plan, plan
        else:
            conn.execute(text("ANALYZE registry"))
            conn.execute(text("SET LOCAL enable_seqscan = off"))  # a table this small is read whole anyway
            plan = "\n".join(row[0] for row in conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT TEXT) {page}")))
            assert "Index Scan Backward using ix_registry_owner_kind_created_at_id" in plan, plan
            assert "Sort" not in plan and "rows=11 loops=1" in plan, plan  # stopped after the page
    engine.dispose()


def test_a_first_page_holding_every_match_is_not_counted_again(log: EpisodeLog) -> None:
    _seed_episodes(log.engine, 40)
    with _statements(log.engine) as sent:
        page = log.list_episodes(EpisodeFilter(query_contains="zanzibar"), limit=20, count=True)
    assert [e.id for e in page.items] == [f"{3:032x}"] and page.total == 1
    # one read of the log for the page; the old listing read it again to count one match
    assert not [s for s, _ in sent if "count(" in s.lower()], sent
    with _statements(log.engine) as sent:
        full = log.list_episodes(EpisodeFilter(query_contains="question"), limit=20, count=True)
    assert full.total == 40 and [s for s, _ in sent if "count(" in s.lower()]  # a page with more is counted


def test_episodes_all_streams_every_match_a_batch_per_read(log: EpisodeLog, migrated_url: str, tmp_path: Path) -> None:
    _seed_episodes(log.engine, 23)
    with _loaded(EpisodeRow) as loaded, _statements(log.engine) as sent:
        seen = []
        for summary in log.iter_episodes(batch=5):
            seen.append(summary.id)
            assert loaded[0] <= len(seen) + 4  # never more than a batch ahead of the reader
    assert seen == [f"{i:032x}" for i in range(22, -1, -1)]
    assert len([s for s, _ in sent if "FROM episodes" in s and "ORDER BY" in s]) == 5
    out = tmp_path / "episodes.json"
    result = runner.invoke(app, ["episodes", "list", "--db", migrated_url, "--all", "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert [e["id"] for e in document["episodes"]] == seen and document["next_cursor"] is None
    assert out.read_text() == json.dumps(document, indent=2) + "\n"
    table = runner.invoke(app, ["episodes", "list", "--db", migrated_url, "--all", "--search", "zanzibar"])
    assert table.exit_code == 0 and f"{3:032x}" in table.output and "1 episodes" in table.output, table.output


def test_a_snapshot_filter_sends_its_versions_as_one_parameter(log: EpisodeLog) -> None:
    _seed_episodes(log.engine, 1500)
    with log.engine.begin() as conn:
        conn.execute(
            insert(table_of(PolicySnapshotRow)),
            [
                dict(version=f"linear-x+{k}", policy="linear", parent=None, model=b"", learner_args={}, metrics={},
                     status="saved", created_at=T0)
                for k in (0, 1000)
            ],
        )  # fmt: skip
    with _statements(log.engine) as sent:
        page = log.list_episodes(EpisodeFilter(snapshot="linear-x+0"), limit=5, count=True)
    assert [e.id for e in page.items] == [f"{i:032x}" for i in range(999, 994, -1)] and page.total == 1000
    widest = max(len(params) if isinstance(params, (dict, list, tuple)) else 0 for _, params in sent)
    assert widest < 20, widest  # the old filter bound each of the 1,000 versions, in the page and the count
    assert [e.id for e in log.list_episodes(EpisodeFilter(snapshot="linear-x+1000"), limit=3).items] == [
        f"{i:032x}" for i in range(1499, 1496, -1)
    ]


def test_a_streamed_listing_refused_at_its_first_read_writes_no_half_document(migrated_url: str) -> None:
    # `--json -` into jq: a refused filter left `{"episodes": [` on standard output before the error
    for args in (
        ["episodes", "list", "--all", "--snapshot", "no-such-version"],
        ["memories", "list", "--user", ""],
    ):
        result = runner.invoke(app, [*args, "--db", migrated_url, "--json", "-"])
        assert result.exit_code == 1, result.output
        assert result.stdout == "", result.stdout
        assert "error:" in result.stderr
