"""``open_log`` on an in-memory SQLite database (``sqlite://``, a test's log): it gets its schema on
the log's own engine, the only place that database exists, instead of an error advising a
``memabra db upgrade`` that could never reach it."""

from __future__ import annotations

import pytest

from memabra import SchemaError, SQLMemory
from memabra.storage import EpisodeLog, current_revision, head_revision, open_log


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_open_log_in_memory_gets_its_schema_and_keeps_what_is_written(url: str) -> None:
    with open_log(url) as log:
        assert current_revision(log.engine) == head_revision()
        assert log.count_episodes() == 0
        _remember(log)
        assert _texts(log) == ["I live in Oslo"]


def test_each_in_memory_log_is_a_database_of_its_own() -> None:
    with open_log("sqlite://") as one, open_log("sqlite://") as two:
        _remember(one)
        assert _texts(one) == ["I live in Oslo"]
        assert _texts(two) == []


def test_an_episode_log_on_an_empty_memory_database_points_to_open_log() -> None:
    with pytest.raises(SchemaError, match=r"open_log") as caught:
        EpisodeLog("sqlite://")
    assert "run `memabra db upgrade" not in str(caught.value)


def _remember(log: EpisodeLog) -> None:
    SQLMemory(log).remember("ann", "I live in Oslo")


def _texts(log: EpisodeLog) -> list[str]:
    return [m.text for m in SQLMemory(log).list("ann")]
