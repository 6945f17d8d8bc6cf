"""``memabra episodes export --final-only --after CURSOR``: incremental loads into a warehouse, each
final decision exactly once, in the order rewards became final, on every backend."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from memabra import Episode, InvalidRecordError, RewardBreakdown, RewardComponents, RewardWeights, erase_user
from memabra._cli import app
from memabra.evals.offline import export_decisions
from memabra.evals.offline._export import ExportCursor, export_final_decisions, parse_cursor
from memabra.storage import EpisodeLog, make_engine
from memabra.storage._learner_commit import ReadPosition

REWARD = RewardBreakdown(RewardComponents(s=1.0, hm=0.5), RewardWeights())


def _by_time(log: EpisodeLog, **kwargs: object) -> list[str]:
    out = io.StringIO()
    export_decisions(log, out, **kwargs)  # type: ignore[arg-type]
    return [json.loads(line)["episode_id"] for line in out.getvalue().splitlines()]


def _after(
    log: EpisodeLog, cursor: ExportCursor | None, **kwargs: object
) -> tuple[list[dict[str, object]], ExportCursor]:
    out = io.StringIO()
    done = export_final_decisions(log, out, after=cursor, **kwargs)  # type: ignore[arg-type]
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == done.written
    return lines, done.cursor


def _until(
    log: EpisodeLog, cursor: ExportCursor | None, n: int, **kwargs: object
) -> tuple[list[dict[str, object]], ExportCursor]:
    """``_after`` until ``n`` lines came back. On PostgreSQL a reward is read only once every older
    transaction on the server has ended: another test's open one holds a run back for a moment."""
    lines, deadline = [], time.monotonic() + 30
    while True:
        more, cursor = _after(log, cursor, **kwargs)
        lines += more
        if len(lines) >= n or time.monotonic() > deadline:
            return lines, cursor
        time.sleep(0.1)


def _episode(user: str = "ann", *, at_hours: float = 0.0, decisions: int = 1) -> Episode:
    from factories import episode

    first = episode(user)
    sels = [first.selections[0]] + [episode(user).selections[0] for _ in range(decisions - 1)]
    when = first.created_at + timedelta(hours=at_hours)
    sels = [dataclasses.replace(s, created_at=when + timedelta(seconds=i)) for i, s in enumerate(sels)]
    return dataclasses.replace(first, created_at=when, selections=tuple(sels))


def test_a_decision_finalised_after_its_window_was_exported_comes_in_the_next_incremental_run(
    log: EpisodeLog,
) -> None:
    t0 = _episode(at_hours=0)  # decided at t0, its feedback window still open
    log.log_episodes([t0])
    night1 = t0.created_at + timedelta(hours=1)
    # The gap, by decision time: night 1 covers t0 but its reward is not final yet, and night 2's
    # window starts after t0, so no --since/--until run ever exports it without re-exporting.
    assert _by_time(log, until=night1, final_only=True) == []
    lines, cursor = _after(log, None)
    assert lines == []

    log.put_reward(t0.id, REWARD, final=True)  # `memabra rewards finalize`, the next day
    later = _episode(at_hours=2)
    log.log_episodes([later])
    log.put_reward(later.id, REWARD, final=True)
    assert _by_time(log, since=night1, final_only=True) == [later.id]  # t0 is lost to a time window

    lines, cursor = _until(log, cursor, 2)
    assert [line["episode_id"] for line in lines] == [t0.id, later.id]  # in the order they became final
    assert all(line["reward"]["final"] for line in lines)  # type: ignore[index]
    assert lines[-1]["cursor"] == str(cursor)
    assert _after(log, cursor)[0] == []  # nothing twice
    log.put_reward(t0.id, REWARD, final=True)  # a final reward is never replaced: no new place in the order
    assert _after(log, cursor)[0] == []


def test_a_cursor_from_any_line_goes_on_right_after_it(log: EpisodeLog) -> None:
    """A stream cut short (``--out -`` into a loader) resumes from the last line loaded, even inside
    an episode of several decisions."""
    episodes = [_episode(decisions=3), _episode(), _episode(decisions=2)]
    log.log_episodes(episodes)
    for e in episodes:
        log.put_reward(e.id, REWARD, final=True)
    everything, end = _until(log, None, 6)
    assert [line["decision_id"] for line in everything] == [s.id for e in episodes for s in e.selections]
    for i, line in enumerate(everything):
        rest, again = _after(log, parse_cursor(str(line["cursor"])))
        assert [r["decision_id"] for r in rest] == [r["decision_id"] for r in everything[i + 1 :]]
        assert again == end


def test_a_reward_finalised_in_a_transaction_still_open_is_not_skipped(log: EpisodeLog, migrated_url: str) -> None:
    """PostgreSQL numbers the order by transaction id, not commit time: a reward made final by a
    transaction that commits after a later one must not land behind a cursor already handed out."""
    if not log.transactions.is_postgres:
        pytest.skip("SQLite has one writer at a time: its numbers follow commit order")
    slow, fast = _episode(), _episode()
    log.log_episodes([slow, fast])
    log.put_reward(slow.id, REWARD, final=False)
    engine = make_engine(migrated_url)
    try:
        with engine.connect() as conn:
            conn.execute(text("UPDATE rewards SET final = true WHERE episode_id = :e"), {"e": slow.id})
            log.put_reward(fast.id, REWARD, final=True)  # committed first, with the larger number
            lines, cursor = _after(log, None)
            assert lines == []  # held back behind the open transaction, not exported past it
            conn.commit()
    finally:
        engine.dispose()
    lines, _ = _until(log, cursor, 2)
    assert sorted(str(line["episode_id"]) for line in lines) == sorted([slow.id, fast.id])


def test_a_recomputed_reward_is_not_exported_again(log: EpisodeLog) -> None:
    from memabra._feedback import recompute_rewards

    e = _episode()
    log.log_episodes([e])
    log.put_reward(e.id, REWARD, final=True)
    lines, cursor = _until(log, None, 1)
    before = lines[0]["reward"]["total"]  # type: ignore[index]
    assert recompute_rewards(log, RewardWeights(ws=3.0), version="v2") == 1
    assert _after(log, cursor)[0] == []  # its place in the commit order is kept: see the docs
    out = io.StringIO()
    export_decisions(log, out, final_only=True)  # re-exported by time, replaced by decision_id
    now = json.loads(out.getvalue())["reward"]
    assert now["version"] == "v2" and now["total"] != before


def test_erased_users_are_gone_from_later_exports(log: EpisodeLog) -> None:
    ann, bob, ann2 = _episode("ann"), _episode("bob"), _episode("ann")
    log.log_episodes([ann, bob])
    for e in (ann, bob):
        log.put_reward(e.id, REWARD, final=True)
    lines, cursor = _until(log, None, 2)
    assert lines[-1]["episode_id"] == bob.id
    erase_user(log, "bob")
    log.log_episodes([ann2])
    log.put_reward(ann2.id, REWARD, final=True)
    assert "bob" not in {line["user_id"] for line in _after(log, None)[0]}
    assert "bob" not in {json.loads(x)["user_id"] for x in _export_all(log)}
    if log.transactions.is_postgres:  # transaction ids are never given twice: the chain goes on
        assert [line["episode_id"] for line in _until(log, cursor, 1)[0]] == [ann2.id]
        return
    # ann2's reward is numbered past bob's, erased (before revision 0015 it got bob's number again);
    # the cursor is still refused on SQLite, which cannot tell bob's erasure from another log's cursor
    with log.engine.connect() as conn:
        seq = conn.execute(text("SELECT commit_seq FROM rewards WHERE episode_id = :e"), {"e": ann2.id}).scalar()
    assert seq == cursor.position.seq + 1
    with pytest.raises(InvalidRecordError, match="no longer in this log"):
        _after(log, cursor)


def _export_all(log: EpisodeLog) -> list[str]:
    out = io.StringIO()
    export_decisions(log, out)
    return out.getvalue().splitlines()


def test_one_users_chain(log: EpisodeLog) -> None:
    ann, bob = _episode("ann"), _episode("bob")
    log.log_episodes([ann, bob])
    for e in (ann, bob):
        log.put_reward(e.id, REWARD, final=True)
    lines, cursor = _until(log, None, 1, user_id="ann")
    assert [line["episode_id"] for line in lines] == [ann.id]
    with pytest.raises(InvalidRecordError, match="one user's decisions"):
        _after(log, cursor)  # an all-users chain would skip bob's decisions before the cursor
    with pytest.raises(InvalidRecordError, match="user 'bob'"):
        _after(log, cursor, user_id="bob")


def test_bad_cursors_are_refused_naming_the_problem(log: EpisodeLog) -> None:
    e = _episode()
    log.log_episodes([e])
    log.put_reward(e.id, REWARD, final=True)
    _, cursor = _until(log, None, 1)
    good = str(cursor)
    for text_, problem in (
        ("yesterday", "not an export cursor"),
        (good[:-3], "damaged"),
        (good[:12] + ("A" if good[12] != "A" else "B") + good[13:], "damaged"),
    ):
        with pytest.raises(InvalidRecordError, match=problem):
            parse_cursor(text_)
    assert parse_cursor(good) == cursor and parse_cursor("start") == ExportCursor()
    for other, problem in (
        (dataclasses.replace(cursor, database="pg-0123456789ab"), "another database"),
        (dataclasses.replace(cursor, position=ReadPosition(10**15, "0" * 32)), "past every reward|no longer in this"),
        (dataclasses.replace(cursor, position=ReadPosition(cursor.position.seq - 1, e.id)), "another place"),
    ):
        with pytest.raises(InvalidRecordError, match=problem):
            _after(log, parse_cursor(str(other)))


def test_a_cursor_of_another_sqlite_log_is_refused(tmp_path: Path) -> None:
    from memabra.storage import upgrade

    urls = [f"sqlite:///{tmp_path / name}" for name in ("a.db", "b.db")]
    cursors = []
    for url, n in zip(urls, (3, 1), strict=True):
        upgrade(url)
        with EpisodeLog(url) as log:
            episodes = [_episode() for _ in range(n)]
            log.log_episodes(episodes)
            for e in episodes:
                log.put_reward(e.id, REWARD, final=True)
            cursors.append(_until(log, None, n)[1])
    with EpisodeLog(urls[1]) as log, pytest.raises(InvalidRecordError, match="no longer in this log"):
        _after(log, cursors[0])


def test_cli_nightly_chain(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        episodes = [_episode(), _episode()]
        log.log_episodes(episodes)
        log.put_reward(episodes[0].id, REWARD, final=True)
    runner = CliRunner()
    out, saved = tmp_path / "night.jsonl", tmp_path / "cursor"

    def night() -> list[str]:
        after = saved.read_text().strip() if saved.exists() else "start"
        args = ["episodes", "export", "--final-only", "--after", after, "--cursor-out", str(saved)]
        result = runner.invoke(app, [*args, "--out", str(out), "--db", migrated_url])
        assert result.exit_code == 0, result.output
        assert f"cursor {saved.read_text().strip()}" in result.stderr
        return [json.loads(line)["episode_id"] for line in out.read_text().splitlines()]

    def nights(n: int) -> list[str]:  # held back a moment on PostgreSQL (see _until)
        exported, deadline = night(), time.monotonic() + 30
        while len(exported) < n and time.monotonic() < deadline:
            time.sleep(0.1)
            exported += night()
        return exported

    assert nights(1) == [episodes[0].id]
    with EpisodeLog(migrated_url) as log:
        log.put_reward(episodes[1].id, REWARD, final=True)
    assert nights(1) == [episodes[1].id]
    assert night() == []


def test_cli_refusals_write_nothing(migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with EpisodeLog(migrated_url) as log:
        e = _episode()
        log.log_episodes([e])
        log.put_reward(e.id, REWARD, final=True)
    runner = CliRunner()
    out, saved = tmp_path / "night.jsonl", tmp_path / "cursor"
    base = ["episodes", "export", "--out", str(out), "--db", migrated_url]
    for extra, problem in (
        (["--after", "start"], "add --final-only"),
        (["--final-only", "--after", "start", "--since", "2024-01-01"], "cannot be combined with --since"),
        (["--final-only"], "--cursor-out needs --after"),
        (["--final-only", "--after", "mdc1.garbage.0"], "damaged"),
        (["--final-only", "--after", "2024-01-01"], "not an export cursor"),
    ):
        result = runner.invoke(app, [*base, *extra, "--cursor-out", str(saved)])
        assert result.exit_code == 1 and problem in result.stderr, (extra, result.output)
        assert not out.exists() and not saved.exists()

    # a failure part way leaves neither file, so the saved cursor still says where the last load ended
    from memabra.evals.offline import _export

    monkeypatch.setattr(_export, "decision_record", lambda d: (_ for _ in ()).throw(OSError(28, "No space left")))
    failed = runner.invoke(app, [*base, "--final-only", "--after", "start", "--cursor-out", str(saved)])
    assert failed.exit_code == 1 and "No space left" in failed.output
    assert not out.exists() and not saved.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
