"""``one_call``: a call of several write transactions (feedback, then the memory it retracts) whose
later transaction cannot open its connection says ``may_have_written`` once an earlier one
committed; the error of that transaction alone said "nothing reached the database", and a client
told so sent the stored change again."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy.orm import Session

from factories import episode
from memabra.storage import DatabaseUnavailableError, EpisodeLog
from memabra.storage._tx import Transactions, one_call


def _unreachable_from_now(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection opened from now on is refused, as a PostgreSQL that went down would."""

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise psycopg.OperationalError("connection refused")

    log.engine.pool.dispose()
    monkeypatch.setattr(log.engine.dialect, "connect", refused)


def test_a_later_write_that_never_connects_says_the_call_may_have_written(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    if log.engine.dialect.name != "postgresql":
        pytest.skip("a refused connection is PostgreSQL's (a SQLite file is opened, not connected to)")
    stored = episode()
    with pytest.raises(DatabaseUnavailableError) as raised, one_call():
        log.log_episode(stored)  # committed
        _unreachable_from_now(log, monkeypatch)
        log.log_episode(episode())
    assert raised.value.may_have_written is True
    monkeypatch.undo()
    assert log.get_episode(stored.id).id == stored.id


def test_a_call_that_committed_nothing_still_says_nothing_was_written(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    if log.engine.dialect.name != "postgresql":
        pytest.skip("a refused connection is PostgreSQL's")
    with pytest.raises(DatabaseUnavailableError) as raised, one_call():
        log.count_episodes()  # a read commits nothing of the caller's
        _unreachable_from_now(log, monkeypatch)
        log.log_episode(episode())
    assert raised.value.may_have_written is False


def test_each_backend_counts_a_committed_write_of_the_call(log: EpisodeLog) -> None:
    tx = Transactions(log.engine)

    def unreached(_session: Session) -> None:
        raise DatabaseUnavailableError("cannot connect to the database", may_have_written=False)

    with pytest.raises(DatabaseUnavailableError) as raised, one_call(), one_call():  # nested: the outer counts
        tx.write(lambda s: None)
        tx.write(unreached)
    assert raised.value.may_have_written is True
    with pytest.raises(DatabaseUnavailableError) as alone:
        tx.write(lambda s: None)  # outside a call: the transaction speaks for itself
        tx.write(unreached)
    assert alone.value.may_have_written is False
