"""A SQLite volume that fills up: each write is refused whole with an error naming the database,
the cause and what to do, nothing half-written stays behind, and the same log writes again as soon
as there is room, with no restart and no new log.

The full volume is SQLite's own ``SQLITE_FULL`` ("database or disk is full"), made by capping the
file at its size (``PRAGMA max_page_count``) on every pooled connection: the error a full disk gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from factories import episode
from memabra import Feedback, PolicySnapshot
from memabra.storage import DatabaseNotWritableError, EpisodeLog, LearnerStore, current_revision, make_engine, upgrade
from memabra.storage._learner import START, ReadPosition

_ROOM = 1_073_741_823  # SQLite's largest max_page_count: as much room as the volume has


class Volume:
    """A cap on the database file's size, applied at every checkout of ``engine``'s connections."""

    def __init__(self, engine: Engine) -> None:
        self.full = False
        event.listen(engine, "checkout", self._cap)

    def _cap(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        # max_page_count cannot go below the file's size: asking for 1 caps it at its size now
        dbapi_connection.execute(f"PRAGMA max_page_count={1 if self.full else _ROOM}")


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    url = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(url)
    return url


@pytest.fixture
def full_log(sqlite_url: str) -> Iterator[tuple[EpisodeLog, Volume]]:
    engine = make_engine(sqlite_url)
    volume = Volume(engine)
    with EpisodeLog(engine=engine) as log:
        yield log, volume
    engine.dispose()


def _fill(log: EpisodeLog, volume: Volume) -> DatabaseNotWritableError:
    """Fill the volume: episodes are logged until one is refused (the last page had room for some)."""
    volume.full = True
    for _ in range(500):
        try:
            log.log_episode(episode())
        except DatabaseNotWritableError as exc:
            return exc
    raise AssertionError("the capped file never filled")


def _counts(log: EpisodeLog) -> tuple[int, int, int]:
    with log.engine.connect() as conn:
        return (
            conn.execute(text("SELECT count(*) FROM episodes")).scalar_one(),
            conn.execute(text("SELECT count(DISTINCT episode_id) FROM decisions")).scalar_one(),
            conn.execute(text("SELECT count(*) FROM decisions")).scalar_one(),
        )


def test_a_full_disk_refuses_an_episode_whole_says_why_and_the_log_writes_again_once_freed(
    full_log: tuple[EpisodeLog, Volume], sqlite_url: str
) -> None:
    log, volume = full_log
    refused = _fill(log, volume)
    where = sqlite_url.removeprefix("sqlite:///")
    message = str(refused)
    assert f"the database sqlite:///{where} refused log_episodes: database or disk is full" in message
    assert "free space on the volume" in message and "nothing of this write was stored" in message
    assert "\n" not in message and "INSERT" not in message  # one line, no statement dump
    episodes, with_decisions, decisions = _counts(log)
    assert episodes == with_decisions == decisions  # every stored episode has its decision, none half-written
    with pytest.raises(DatabaseNotWritableError):  # still full: refused again, not retried for seconds
        log.log_episode(episode())
    volume.full = False  # space freed: the same log, no restart
    log.log_episode(episode())
    assert _counts(log) == (episodes + 1,) * 3


def test_feedback_refused_by_a_full_disk_is_stored_once_when_sent_again(full_log: tuple[EpisodeLog, Volume]) -> None:
    log, volume = full_log
    episodes = [episode() for _ in range(200)]
    log.log_episodes(episodes)
    volume.full = True
    for ep in episodes:  # feedback keeps coming while the volume fills
        feedback = Feedback(ep.id, "explicit", "user", {"correct": False, "correction": True})
        try:
            log.add_feedback(feedback, final=True)
        except DatabaseNotWritableError as exc:
            assert "database or disk is full; free space on the volume" in str(exc)
            break
    else:
        raise AssertionError("the capped file never filled")
    assert log.feedback_for(ep.id) == ()  # not half-applied
    volume.full = False
    assert log.add_feedback(feedback, final=True).status == "stored"  # the client's retry
    assert log.add_feedback(feedback, final=True).status == "duplicate"
    assert [f.id for f in log.feedback_for(ep.id)] == [feedback.id]


def test_a_learner_commit_refused_by_a_full_disk_leaves_no_torn_checkpoint(
    full_log: tuple[EpisodeLog, Volume],
) -> None:
    log, volume = full_log
    store = LearnerStore(log.engine)
    store.commit(PolicySnapshot("p", "p-1", b"m" * 64), previous=START, position=ReadPosition(1, "a"), learned=1)
    _fill(log, volume)
    # a model larger than a page: it needs pages the volume no longer has
    big = PolicySnapshot("p", "p-2", b"x" * 200_000, parent="p-1")
    with pytest.raises(DatabaseNotWritableError, match=r"refused the learner commit of policy 'p'"):
        store.commit(big, previous=ReadPosition(1, "a"), position=ReadPosition(9, "z"), learned=8)
    checkpoint = store.checkpoint("p")
    assert checkpoint is not None and (checkpoint.position, checkpoint.learned) == (ReadPosition(1, "a"), 1)
    assert [s.version for s in log.list_snapshots("p")] == ["p-1"] and store.active_version("p") == "p-1"
    volume.full = False  # the learner's next try, from its last commit
    stored = store.commit(big, previous=ReadPosition(1, "a"), position=ReadPosition(9, "z"), learned=8)
    assert stored.status == "active" and store.active_version("p") == "p-2"


def test_a_schema_upgrade_on_a_full_disk_changes_nothing_and_says_why(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    engine = make_engine(url)
    volume = Volume(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE app_notes (id INTEGER PRIMARY KEY)")  # the file has a page or two
    volume.full = True
    with pytest.raises(DatabaseNotWritableError, match=r"refused a write: database or disk is full; free space"):
        upgrade(engine)
    assert current_revision(engine) is None  # no half-made schema: the migration was one transaction
    volume.full = False
    upgrade(engine)
    assert current_revision(engine) is not None
    engine.dispose()
