"""A shared-cache in-memory SQLite URI (``sqlite:///file:NAME?mode=memory&cache=shared&uri=true``):
what a test or an embedding app picks to give several logs of one process the same throwaway
database. Its engine is built as ``sqlite://``'s is, one connection held for the engine's life
(SQLAlchemy's own pick for it, a ``SingletonThreadPool``, is deprecated and warns, opened one
connection per thread, and past five threads closed another thread's connection under it): the
database lives while a log on it is open, whichever threads used it, and another log of the
process on the same name reads and writes it. Two logs writing it at once meet SQLite's shared-cache
table lock, which never waits the busy timeout: the write is retried as a locked file's is.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from sqlalchemy.pool import StaticPool

from factories import episode
from memabra.storage import EpisodeLog, make_engine, open_log


def _url() -> str:
    return f"sqlite:///file:memabra_{uuid.uuid4().hex[:12]}?mode=memory&cache=shared&uri=true"


def _in_threads(work: Callable[[int], None], n: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


def test_its_engine_holds_one_connection_as_sqlite_memory_does() -> None:
    engine = make_engine(_url())  # SQLAlchemy's own pick warns (an error under this suite's filters)
    try:
        assert isinstance(engine.pool, StaticPool)
    finally:
        engine.dispose()


def test_what_one_log_writes_stays_across_threads_and_another_log_reads_it() -> None:
    url = _url()
    with open_log(url) as log:
        kept = episode()
        log.log_episode(kept)
        # one thread at a time, more of them than SingletonThreadPool kept connections for
        errors = _in_threads(lambda _i: log.get_episode(kept.id), 1)
        for _ in range(7):
            errors += _in_threads(lambda _i: log.get_episode(kept.id), 1)
        assert errors == []
        with EpisodeLog(url) as other:  # the same database, through an engine of its own
            assert other.get_episode(kept.id).id == kept.id
            other.log_episode(episode())
        assert log.count_episodes() == 2


def test_two_logs_writing_at_once_each_store_every_episode() -> None:
    url = _url()
    with open_log(url) as first, EpisodeLog(url) as second:
        logs = (first, second)
        errors = _in_threads(lambda i: [logs[i].log_episode(episode()) for _ in range(25)], 2)
        assert errors == []
        assert first.count_episodes() == 50
