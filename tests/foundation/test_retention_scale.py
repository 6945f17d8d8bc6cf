"""A retention run's cost grows with the episodes it walks, not with their square.

Each chunk of :func:`memabra.storage._retention.delete_episodes` used to select its episodes from
the start of the log again: the episodes kept for a learner (a policy's learner far behind, windows
nobody closed) were read again by every chunk, and a two-year log's first run with a cut-off
would never end. The work is counted in SQLite virtual-machine steps, which do not depend on the
machine's speed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select

from factories import episode
from memabra import RewardBreakdown, RewardComponents, RewardWeights
from memabra._records import PolicySnapshot
from memabra.storage import EpisodeLog, upgrade
from memabra.storage import _retention as retention
from memabra.storage._models import EpisodeRow

REWARD = RewardBreakdown(RewardComponents(s=1.0, hm=1.0), RewardWeights())
CUTOFF = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(retention, "DELETE_CHUNK", 5)
    yield


def _build(url: str, n: int) -> EpisodeLog:
    """``n`` old episodes, one in two with its reward still open (kept), in random id order."""
    upgrade(url)
    log = EpisodeLog(url)
    eps = [dataclasses.replace(episode("ann"), created_at=CUTOFF - timedelta(days=1, seconds=i)) for i in range(n)]
    log.log_episodes(eps)
    for i, ep in enumerate(eps):
        log.put_reward(ep.id, REWARD, final=i % 2 == 0)
    while log.claim_learning(limit=1000):
        pass
    return log


def _select_steps(log: EpisodeLog) -> list[int]:
    """A counter (one item) of the VM steps spent in the statements that select a chunk."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        raw = conn.connection.dbapi_connection
        chunk_select = statement.lstrip().startswith("SELECT episodes.") and "LIMIT" in statement
        raw.set_progress_handler(count if chunk_select else None, 1)

    event.listen(log.engine, "before_cursor_execute", before)
    return steps


def _deletion_work(tmp_path: Any, n: int) -> int:
    log = _build(f"sqlite:///{tmp_path / f'scale-{n}.db'}", n)
    try:
        steps = _select_steps(log)
        result = log.delete_episodes(before=CUTOFF)
        assert (result.deleted, result.kept_open) == (n // 2, n // 2)
        with log.transactions.read() as s:
            assert s.scalar(select(func.count()).select_from(EpisodeRow)) == n // 2
        return steps[0]
    finally:
        log.close()


def test_a_run_past_many_kept_episodes_reads_each_once(tmp_path: Any, small_chunks: None) -> None:
    small, large = _deletion_work(tmp_path, 200), _deletion_work(tmp_path, 800)
    # four times the episodes: four times the work, give or take; re-reading the kept ones from
    # the start of the log at every chunk made it about sixteen times
    assert large < 7 * small, f"VM steps selecting chunks: {small} for 200 episodes, {large} for 800"


def _snapshot_prune_work(tmp_path: Any, n: int) -> int:
    """VM steps of ``prune_snapshots(5)`` over a chain of ``n`` snapshots, oldest first."""
    url = f"sqlite:///{tmp_path / f'snapshots-{n}.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        t0 = CUTOFF
        for i in range(n):
            parent = f"vw-{i - 1:05d}" if i else None
            log.save_snapshot(
                PolicySnapshot("vw", f"vw-{i:05d}", b"model", parent=parent, created_at=t0 + timedelta(seconds=i))
            )
        log.promote(f"vw-{n - 1:05d}")
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            conn.connection.dbapi_connection.set_progress_handler(count, 1)

        event.listen(log.engine, "before_cursor_execute", before)
        result = log.prune_snapshots(5)
        event.remove(log.engine, "before_cursor_execute", before)
        assert len(result.pruned) == n - 6  # the newest 5, and 5 generations above the active (newest) one
        assert log.get_snapshot(f"vw-{n - 6:05d}").parent is None  # the oldest kept: its parent went
        return steps[0]


def test_pruning_snapshots_finds_each_ones_children_without_a_scan(tmp_path: Any) -> None:
    # each deleted snapshot nulls its children's parent (ON DELETE SET NULL); with no index on
    # parent every one scanned the table: four times the snapshots took about sixteen times the work
    small, large = _snapshot_prune_work(tmp_path, 150), _snapshot_prune_work(tmp_path, 600)
    assert large < 7 * small, f"VM steps pruning: {small} for 150 snapshots, {large} for 600"


def test_an_erasure_deletes_an_episode_logged_behind_its_walk(log: EpisodeLog, small_chunks: None) -> None:
    # a paused turn resumed during the erasure is logged with the time it was routed (an hour ago,
    # a day ago): behind the walk's (created_at, id) cursor. Erasing walked the user's episodes
    # once and finished with that episode still in the log, recorded as an erasure done
    eps = [dataclasses.replace(episode("ann"), created_at=CUTOFF - timedelta(minutes=i)) for i in range(12)]
    log.log_episodes(eps)
    late = dataclasses.replace(episode("ann"), created_at=CUTOFF - timedelta(days=1))

    def resume_a_paused_turn(deleted: int) -> None:
        if deleted == retention.DELETE_CHUNK:  # after the first chunk
            log.log_episode(late)

    erased = log.erase_user("ann", lambda: 0, progress=resume_a_paused_turn)
    with log.transactions.read() as s:
        left = s.scalar(select(func.count()).select_from(EpisodeRow).where(EpisodeRow.user_id == "ann"))
    assert (erased.episodes, left) == (13, 0)
