"""Deleting episodes (retention and erasure), on every configured backend."""

from __future__ import annotations

import json
import os
import random
import signal
import time
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from factories import episode
from memabra import (
    CandidateKind,
    Feedback,
    InvalidRecordError,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    Step,
    StepKind,
    UnknownEpisodeError,
)
from memabra._cli import app
from memabra._records import RegistryItem
from memabra.storage import EpisodeLog, LearnerStore
from memabra.storage._memory_models import MemoryHistoryRow
from memabra.storage._models import (
    DecisionCandidateRow,
    DecisionRow,
    DecisionSlotRow,
    EpisodeRow,
    FeedbackRow,
    PolicySnapshotRow,
    RewardRow,
    StepRow,
)

NOW = datetime.now(UTC)  # the CLI measures --older-than from the clock
REWARD = RewardBreakdown(RewardComponents(s=1.0, hm=1.0), RewardWeights())
CHILD_TABLES = (DecisionRow, DecisionSlotRow, DecisionCandidateRow, StepRow, FeedbackRow, RewardRow)


def _log_one(log: EpisodeLog, user: str, *, days_ago: int, reward: str | None = "learned") -> str:
    """One episode with a step and feedback; ``reward``: None, "open", "final" or "learned"."""
    steps = (
        Step(StepKind.MODEL, "m", input_tokens=5, output_tokens=1, latency_ms=1.0),
        Step(StepKind.TOOL, "t", arguments={"q": 1}, result="ok", latency_ms=1.0),
    )
    ep = episode(user, steps=steps, created_at=NOW - timedelta(days=days_ago))
    log.log_episode(ep)
    log.add_feedback(Feedback(ep.id, "explicit", "test", {"rating": 4}))
    if reward is not None:
        log.put_reward(ep.id, REWARD, final=reward != "open")
    return ep.id


def _learn_all(log: EpisodeLog) -> None:
    while log.claim_learning(limit=1000):
        pass


def _count(log: EpisodeLog, model: type) -> int:  # type: ignore[type-arg]
    with log.transactions.read() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_a_retention_window_deletes_old_episodes_with_everything_under_them(log: EpisodeLog) -> None:
    old = [_log_one(log, "ann", days_ago=100 + i) for i in range(3)]
    recent = _log_one(log, "ann", days_ago=1)
    _learn_all(log)
    before = {m.__tablename__: _count(log, m) for m in CHILD_TABLES}

    result = log.delete_episodes(before=NOW - timedelta(days=30))

    assert (result.deleted, result.kept, result.dry_run) == (3, 0, False)
    assert log.get_episode(recent).id == recent
    for eid in old:
        with pytest.raises(UnknownEpisodeError):
            log.get_episode(eid)
    for model in CHILD_TABLES:  # one episode of four remains, with its own rows only
        assert _count(log, model) == before[model.__tablename__] // 4, model.__tablename__


def test_episodes_a_learner_has_not_read_are_kept_unless_asked(log: EpisodeLog) -> None:
    learned = _log_one(log, "ann", days_ago=50)
    _learn_all(log)
    unlearned = _log_one(log, "ann", days_ago=50, reward="final")
    still_open = _log_one(log, "ann", days_ago=50, reward="open")
    no_reward = _log_one(log, "ann", days_ago=50, reward=None)
    cutoff = NOW - timedelta(days=30)

    dry = log.delete_episodes(before=cutoff, dry_run=True)
    assert (dry.deleted, dry.kept_open, dry.kept_unlearned, dry.dry_run) == (2, 1, 1, True)
    assert _count(log, EpisodeRow) == 4  # a dry run deletes nothing

    kept = log.delete_episodes(before=cutoff)
    assert (kept.deleted, kept.kept_open, kept.kept_unlearned) == (2, 1, 1)
    remaining = {e.id for e in log.list_episodes(limit=50).items}
    assert remaining == {unlearned, still_open}
    assert learned not in remaining and no_reward not in remaining

    forced = log.delete_episodes(before=cutoff, include_unlearned=True)
    assert (forced.deleted, forced.kept) == (2, 0)
    assert _count(log, EpisodeRow) == 0


def test_erasing_a_user_leaves_other_users_and_what_was_learned(log: EpisodeLog) -> None:
    ann = [_log_one(log, "ann", days_ago=d) for d in (1, 5, 9)]
    bob = _log_one(log, "bob", days_ago=1)
    _learn_all(log)
    log.put_items([RegistryItem(CandidateKind.MEMORY, "mem:1", "ann", "I live in Lyon", 4)])
    position = LearnerStore(log.engine).read_final()[-1].position

    result = log.delete_episodes(user_id="ann")

    assert result.deleted == 3
    assert [e.id for e in log.list_episodes(limit=50).items] == [bob]
    assert [i.id for i in log.items("ann")] == ["mem:1"]  # memories are managed by `memories forget`
    # a learner's read position stays valid: what comes after it is still read, nothing twice
    later = _log_one(log, "bob", days_ago=0, reward="final")
    assert [r.position.episode_id for r in LearnerStore(log.engine).read_final(position)] == [later]
    assert ann[0] not in {r.position.episode_id for r in LearnerStore(log.engine).read_final()}


def test_named_episodes_are_deleted_and_an_unknown_id_deletes_nothing(log: EpisodeLog) -> None:
    a, b, c = (_log_one(log, "ann", days_ago=d) for d in (1, 2, 3))
    _learn_all(log)
    with pytest.raises(UnknownEpisodeError, match="'nope'.*nothing was deleted"):
        log.delete_episodes([a, "nope"])
    assert _count(log, EpisodeRow) == 3
    assert log.delete_episodes([a, b, a]).deleted == 2
    assert [e.id for e in log.list_episodes(limit=50).items] == [c]
    # the filters combine: c is not bob's
    assert log.delete_episodes([c], user_id="bob").deleted == 0


def test_bad_requests_are_refused_before_anything_is_deleted(log: EpisodeLog) -> None:
    _log_one(log, "ann", days_ago=1)
    with pytest.raises(InvalidRecordError, match="never deletes the whole log"):
        log.delete_episodes()
    with pytest.raises(InvalidRecordError, match="naive"):
        log.delete_episodes(before=datetime(2026, 1, 1))  # noqa: DTZ001 - the naive value is the point
    with pytest.raises(InvalidRecordError, match="empty"):
        log.delete_episodes([])
    with pytest.raises(InvalidRecordError, match="user_id is empty"):
        log.delete_episodes(user_id=" ")
    assert _count(log, EpisodeRow) == 1


def test_memory_histories_and_snapshots_outlive_the_episodes_they_name(log: EpisodeLog) -> None:
    from memabra import PolicySnapshot, SQLMemory

    eid = _log_one(log, "ann", days_ago=40)
    _learn_all(log)
    SQLMemory(log).remember("ann", "I live in Lyon", episode_id=eid)
    log.save_snapshot(PolicySnapshot("p", "p-1", b"model"))

    assert log.delete_episodes(user_id="ann").deleted == 1
    assert _count(log, MemoryHistoryRow) >= 1
    assert _count(log, PolicySnapshotRow) == 1


def test_deletion_runs_in_chunks_and_reports_progress(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    from memabra.storage import _retention

    monkeypatch.setattr(_retention, "DELETE_CHUNK", 2)
    for d in range(5):
        _log_one(log, "ann", days_ago=40 + d, reward=None)
    seen: list[int] = []
    assert log.delete_episodes(user_id="ann", progress=seen.append).deleted == 5
    assert seen == [2, 4, 5]


def test_cli_deletes_a_window_and_says_what_it_kept(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        _log_one(log, "ann", days_ago=400)
        _learn_all(log)
        _log_one(log, "ann", days_ago=400, reward="open")
        _log_one(log, "ann", days_ago=0)
    runner = CliRunner()
    out = tmp_path / "deleted.json"
    result = runner.invoke(app, ["episodes", "delete", "--older-than", "30d", "--db", migrated_url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "deleted 1 episode(s)" in result.output
    assert "kept 1" in result.output and "--include-unlearned" in result.output
    report = json.loads(out.read_text())
    assert (report["deleted"], report["kept_open"], report["kept_unlearned"]) == (1, 1, 0)

    for args, message in (
        ([], "the whole log is never deleted"),
        (["--older-than", "5x"], "expected a positive age"),
        (["--older-than", "0d"], "expected a positive age"),
        (["--older-than", "99999999999d"], "longer than any date"),
        (["--older-than", "900000d"], "before the year 1"),
        (["--before", "yesterday"], "ISO 8601"),
        (["--before", "2026-01-01", "--older-than", "1d"], "not both"),
        (["no-such-episode"], "no episode with id 'no-such-episode'"),
    ):
        bad = runner.invoke(app, ["episodes", "delete", *args, "--db", migrated_url])
        assert bad.exit_code != 0 and message in bad.output, (args, bad.output)
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 2


def test_every_deletion_leaves_an_audit_entry_and_a_dry_run_or_a_refusal_none(log: EpisodeLog) -> None:
    a, _ = (_log_one(log, "ann", days_ago=d) for d in (1, 2))
    _log_one(log, "bob", days_ago=50)
    _learn_all(log)
    _log_one(log, "bob", days_ago=60, reward="open")
    log.delete_episodes(user_id="ann", dry_run=True)
    with pytest.raises(UnknownEpisodeError):
        log.delete_episodes([a, "nope"])
    assert log.deletion_history() == []

    named = log.delete_episodes([a], actor="admin:token", client="10.0.0.7")
    cutoff = NOW - timedelta(days=30)
    window = log.delete_episodes(before=cutoff, actor="cli:ops")
    erasure = log.delete_episodes(user_id="ann", include_unlearned=True)
    newest, middle, oldest = log.deletion_history()
    assert [e.id for e in (newest, middle, oldest)] == [erasure.audit_id, window.audit_id, named.audit_id]
    assert (oldest.actor, oldest.client, oldest.named, oldest.episode_ids, oldest.deleted) == (
        "admin:token",
        "10.0.0.7",
        1,
        (a,),
        1,
    )
    assert oldest.describe() == f"episode {a}" and oldest.finished_at is not None
    assert (middle.created_before, middle.deleted, middle.kept, middle.actor) == (cutoff, 1, 1, "cli:ops")
    assert middle.describe().startswith("created before ")
    assert (newest.user_id, newest.deleted, newest.actor, newest.named) == ("ann", 1, "library", 0)
    assert newest.describe() == "user ann (unlearned rewards too)"
    assert [e.id for e in log.deletion_history(limit=2, after=newest.id)] == [middle.id, oldest.id]
    assert log.deletion_history(after=oldest.id) == []
    assert [e.id for e in log.deletion_history(user_id="ann")] == [newest.id]
    with pytest.raises(InvalidRecordError, match="no deletion entry with id 'nope'"):
        log.deletion_history(after="nope")
    with pytest.raises(InvalidRecordError, match="actor is empty"):
        log.delete_episodes(user_id="bob", actor=" ")
    assert log.count_episodes() == 1 and len(log.deletion_history()) == 3


def test_an_audit_entry_keeps_the_first_named_ids_and_counts_them_all(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memabra.storage import _deletion_log

    monkeypatch.setattr(_deletion_log, "MAX_NAMED_KEPT", 3)
    ids = sorted(_log_one(log, "ann", days_ago=40 + d, reward=None) for d in range(5))
    log.delete_episodes(ids)
    (entry,) = log.deletion_history()
    assert (entry.named, entry.episode_ids, entry.deleted) == (5, tuple(ids[:3]), 5)
    assert entry.describe() == f"episodes {', '.join(ids[:3])} and 2 more"


def test_cli_lists_the_deletion_history(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        _log_one(log, "ann", days_ago=400)
        _learn_all(log)
    runner = CliRunner()
    assert runner.invoke(app, ["episodes", "delete", "--user", "ann", "--db", migrated_url]).exit_code == 0
    out = tmp_path / "deletions.json"
    result = runner.invoke(app, ["episodes", "deletions", "--db", migrated_url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "user ann" in result.output and "finished" in result.output and "cli" in result.output
    (entry,) = json.loads(out.read_text())
    assert (entry["user_id"], entry["deleted"], entry["named"]) == ("ann", 1, 0)
    assert entry["by"].startswith("cli") and entry["finished_at"] is not None
    bad = runner.invoke(app, ["episodes", "deletions", "--cursor", "nope", "--db", migrated_url])
    assert bad.exit_code == 1 and "no deletion entry with id 'nope'" in bad.output


def test_many_named_ids_are_deleted_a_batch_at_a_time(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    from memabra.storage import _retention

    monkeypatch.setattr(_retention, "_ID_BATCH", 2)
    ids = [_log_one(log, "ann", days_ago=40 + d, reward=None) for d in range(5)]
    kept = _log_one(log, "ann", days_ago=40, reward="final")  # named, but unlearned
    assert log.delete_episodes([*ids, kept], dry_run=True).deleted == 5
    result = log.delete_episodes([*ids, kept])
    assert (result.deleted, result.kept_unlearned) == (5, 1)
    assert [e.id for e in log.list_episodes(limit=50).items] == [kept]


def _delete_until_killed(url: str, after: int, started: Any) -> None:
    from memabra.storage import _retention

    _retention.DELETE_CHUNK = 3  # many small transactions, so a kill lands between and inside them

    def progress(deleted: int) -> None:
        if deleted >= after:
            started.set()  # the parent kills from here on, within a chunk or two

    with EpisodeLog(url) as log:
        log.delete_episodes(user_id="ann", include_unlearned=True, progress=progress)
    started.set()
    time.sleep(60)


@pytest.mark.slow
def test_a_deletion_killed_at_any_moment_leaves_whole_episodes(migrated_url: str) -> None:
    """SIGKILL during a deletion: every episode is there with all its rows, or gone with all of
    them; running the deletion again finishes it."""
    import multiprocessing

    fork = multiprocessing.get_context("fork")
    rng = random.Random(5)
    with EpisodeLog(migrated_url) as log:
        log.log_episodes([episode("ann") for _ in range(300)])
        log.log_episodes([episode("bob") for _ in range(10)])
    remaining = [310]
    for _ in range(5):
        started = fork.Event()
        proc = fork.Process(target=_delete_until_killed, args=(migrated_url, rng.randint(3, 30), started), daemon=True)
        proc.start()
        assert started.wait(30)
        time.sleep(rng.uniform(0, 0.01))
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        with EpisodeLog(migrated_url) as log:
            n = log.count_episodes()
            for model, per_episode in ((DecisionRow, 1), (DecisionCandidateRow, 5), (DecisionSlotRow, 3), (StepRow, 1)):
                assert _count(log, model) == n * per_episode, model.__tablename__
            remaining.append(n)
    assert 10 < remaining[-1] < remaining[0]  # killed part way, not before the first chunk or after the last
    with EpisodeLog(migrated_url) as log:
        killed = log.deletion_history()
        # each killed run's entry counts exactly the episodes it removed, and says it did not finish
        assert len(killed) == 5 and not any(e.finished for e in killed)
        assert sum(e.deleted for e in killed) == remaining[0] - remaining[-1]
        log.delete_episodes(user_id="ann", include_unlearned=True)
        assert {e.user_id for e in log.list_episodes(limit=100).items} == {"bob"}
        assert log.count_episodes() == 10
        last = log.deletion_history(limit=1)[0]
        assert last.finished and last.deleted == remaining[-1] - 10


def _log_while_deleted(url: str, errors: Any) -> None:
    try:
        with EpisodeLog(url) as log:
            for _ in range(40):
                ep = episode("bob")
                log.log_episode(ep)
                log.add_feedback(Feedback(ep.id, "explicit", "test", {"rating": 5}))
    except Exception:  # noqa: BLE001 - reported to the parent
        errors.put(traceback.format_exc())


@pytest.mark.slow
def test_serving_writes_go_on_while_a_deletion_runs(migrated_url: str) -> None:
    import multiprocessing

    fork = multiprocessing.get_context("fork")
    with EpisodeLog(migrated_url) as log:
        for _ in range(5):
            log.log_episodes([episode("ann") for _ in range(100)])
    errors = fork.Queue()
    writer = fork.Process(target=_log_while_deleted, args=(migrated_url, errors))
    writer.start()
    with EpisodeLog(migrated_url) as log:
        assert log.delete_episodes(user_id="ann", include_unlearned=True).deleted == 500
    writer.join(120)
    assert writer.exitcode == 0 and errors.empty(), None if errors.empty() else errors.get()
    with EpisodeLog(migrated_url) as log:
        assert log.count_episodes() == 40


def test_a_log_streamed_while_its_episodes_are_deleted_yields_whole_decisions(log: EpisodeLog) -> None:
    """ope log and episodes export stream the log: a deletion committed mid-stream never surfaces as
    a decision without candidates (an error), only as decisions the stream no longer finds."""
    log.log_episodes([episode("ann") for _ in range(10)])
    stream = log.iter_decisions(chunk_size=2)
    first = [next(stream), next(stream)]
    assert EpisodeLog(engine=log.engine).delete_episodes(user_id="ann", include_unlearned=True).deleted == 10
    rest = list(stream)
    assert 2 <= len(first) + len(rest) <= 10  # SQLite's snapshot still holds them; PostgreSQL's next read does not
    assert all(d.selection.offered for d in first + rest)
