"""Schema migrations run from several threads of one process at once: Alembic keeps the migration
it runs in module globals (its ``context`` proxy), so ``memabra.storage`` runs one at a time per
process whatever the database; each thread's database gets its own schema."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import inspect

from memabra.storage import current_revision, downgrade, head_revision, make_engine, open_log, upgrade
from pg_schema import pg_schema

_THREADS = 4


def _at_once(work: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(_THREADS)

    def run(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as exc:  # noqa: BLE001 - asserted on below, naming the thread's database
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.fixture(params=["sqlite", "postgresql"])
def new_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """Four new databases: SQLite files, or PostgreSQL schemas of their own."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / f'{i}.db'}" for i in range(_THREADS)]
        return
    base = os.environ.get("MEMABRA_TEST_DATABASE_URL")
    if not base:
        pytest.skip("MEMABRA_TEST_DATABASE_URL is not set")
    with ExitStack() as stack:
        yield [stack.enter_context(pg_schema(base)) for _ in range(_THREADS)]


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrades_on_threads_each_migrate_their_own_database(new_urls: list[str]) -> None:
    revisions: dict[int, str] = {}

    def work(i: int) -> None:
        revisions[i] = upgrade(new_urls[i])

    assert _at_once(work) == []
    assert revisions == dict.fromkeys(range(_THREADS), head_revision())
    for url in new_urls:
        assert {"episodes", "alembic_version"} <= _tables(url)


def test_downgrades_and_upgrades_on_threads_each_stay_on_their_own_database(new_urls: list[str]) -> None:
    for url in new_urls:
        upgrade(url)

    def work(i: int) -> None:
        downgrade(new_urls[i], "base")
        upgrade(new_urls[i])

    assert _at_once(work) == []
    for url in new_urls:
        engine = make_engine(url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()


def test_open_log_on_threads_gives_each_new_file_its_schema(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / f'{i}.db'}" for i in range(_THREADS)]

    def work(i: int) -> None:
        with open_log(urls[i]) as log:
            assert log.count_episodes() == 0

    assert _at_once(work) == []


def test_open_log_on_threads_of_one_new_file_all_find_its_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"

    def work(i: int) -> None:
        with open_log(url) as log:
            assert current_revision(log.engine) == head_revision()

    assert _at_once(work) == []
