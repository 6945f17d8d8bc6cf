"""Revision 0018 keys ``memory_scores`` by (decision, scorer): an upgrade keeps every label a
database at 0017 holds, and a downgrade keeps the newest label of each decision."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, inspect, text

from memabra._records import MemoryQuality
from memabra.storage import EpisodeLog, check_schema, current_revision, downgrade, head_revision, upgrade

from .test_mempo_log_reads import _episode

_T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SMALL, LARGE = "mempo:qwen-0.5b", "mempo:qwen-7b"


def _label(decision_id: str, scorer: str, reward: int, minutes: int) -> MemoryQuality:
    return MemoryQuality(decision_id, scorer, 0.25, 0.5, -0.25, reward, 3, scored_at=_T0 + timedelta(minutes=minutes))


def _rows(engine: Engine) -> list[tuple[str, str, int, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT decision_id, scorer, reward, answer_tokens FROM memory_scores ORDER BY decision_id, scorer")
        )
        return [(d, s, int(r), int(t)) for d, s, r, t in rows]


def _key(engine: Engine) -> list[str]:
    return list(inspect(engine).get_pk_constraint("memory_scores")["constrained_columns"])


def test_an_upgrade_from_0017_keeps_every_label_and_lets_a_second_scorer_add_its_own(
    engine: Engine, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    upgrade(engine)
    with EpisodeLog(db_url) as log:
        episodes = [_episode(f"question {i}") for i in range(3)]
        log.log_episodes(episodes)
        ids = [ep.selections[0].id for ep in episodes]
        # what a 0017 log holds: one label per decision, from whichever scorer ran last
        log.store_memory_scores(
            [_label(ids[0], SMALL, 1, 0), _label(ids[1], LARGE, -1, 1), _label(ids[2], SMALL, -1, 2)]
        )
    before = _rows(engine)
    with caplog.at_level(logging.WARNING, logger="memabra"):
        assert downgrade(engine, "0017") == "0017"
    assert not [r for r in caplog.records if "deleted" in r.getMessage()]  # no decision had two labels
    assert _key(engine) == ["decision_id"] and _rows(engine) == before

    assert upgrade(engine) == head_revision()
    check_schema(engine)
    assert _key(engine) == ["decision_id", "scorer"]
    assert _rows(engine) == before  # every label kept, under its scorer
    with EpisodeLog(db_url) as log:
        kept = log.memory_scores(ids, scorer=SMALL)[ids[0]]
        assert (kept.p_selected, kept.p_all, kept.difference, kept.scored_at) == (0.25, 0.5, -0.25, _T0)
        log.store_memory_scores([_label(d, LARGE, 1, 10) for d in ids])
        assert log.memory_label_scorers() == {LARGE: 3, SMALL: 2}
        assert {d: q.reward for d, q in log.memory_scores(ids, scorer=SMALL).items()} == {ids[0]: 1, ids[2]: -1}


def test_a_downgrade_keeps_each_decisions_newest_label_and_says_how_many_it_deleted(
    engine: Engine, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    upgrade(engine)
    with EpisodeLog(db_url) as log:
        episodes = [_episode(f"question {i}") for i in range(3)]
        log.log_episodes(episodes)
        ids = [ep.selections[0].id for ep in episodes]
        log.store_memory_scores(
            [
                _label(ids[0], SMALL, 1, 0),
                _label(ids[0], LARGE, -1, 5),  # newer: kept
                _label(ids[1], SMALL, 1, 7),  # newer: kept
                _label(ids[1], LARGE, -1, 3),
                _label(ids[2], LARGE, 1, 4),  # the same time: the last scorer by name is kept
                _label(ids[2], SMALL, -1, 4),
            ]
        )
    with caplog.at_level(logging.WARNING, logger="memabra"):
        downgrade(engine, "0017")
    assert current_revision(engine) == "0017" and _key(engine) == ["decision_id"]
    assert sorted(_rows(engine)) == sorted([(ids[0], LARGE, -1, 3), (ids[1], SMALL, 1, 3), (ids[2], LARGE, 1, 3)])
    assert any("deleted 3 MemPO labels" in r.getMessage() for r in caplog.records)
    upgrade(engine)
    check_schema(engine)
