"""The failed-turn filter of the episode listing (``episodes list --failed``, the admin's failed
filter and its count) looks up feedback by ``source``. Revision 0021 indexes ``feedback (source,
episode_id)`` so that lookup is an index range, not a scan of the whole feedback table on every page
view: on a PostgreSQL log of 1,000,000 episodes and 333,000 feedback rows the list's two queries took
235 ms, and 3 ms with the index (docs/storage.md, "Reading a large log")."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import inspect

from factories import episode
from memabra import Feedback, FeedbackKind
from memabra._feedback import RewardService
from memabra._graph_steps import FAILED_TURN_SOURCE
from memabra.storage import EpisodeFilter, EpisodeLog, downgrade, upgrade
from memabra.storage._models import FeedbackRow, table_of

_NAME = "ix_feedback_source_episode_id"


def _feedback_indexes(log: EpisodeLog) -> dict[str, list[str | None]]:
    return {ix["name"]: list(ix["column_names"]) for ix in inspect(log.engine).get_indexes("feedback") if ix["name"]}


def test_a_migrated_log_indexes_feedback_by_source_then_episode(log: EpisodeLog) -> None:
    assert _feedback_indexes(log).get(_NAME) == ["source", "episode_id"]


def test_the_model_declares_the_index_the_migration_builds() -> None:
    declared = {ix.name: [c.name for c in ix.columns] for ix in table_of(FeedbackRow).indexes}
    assert declared.get(_NAME) == ["source", "episode_id"]


def test_the_index_steps_down_and_up(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        downgrade(log.engine, "0020")
        assert _NAME not in _feedback_indexes(log)
        upgrade(log.engine)
        assert _feedback_indexes(log).get(_NAME) == ["source", "episode_id"]


def _logged(log: EpisodeLog, at: datetime, source: str | None) -> str:
    ep = episode("u1", created_at=at)
    if source is not None:
        payload = {"accepted": False, "comment": "model_error: boom"}
        ep = replace(ep, feedback=(Feedback(ep.id, FeedbackKind.PROGRAMMATIC, source, payload, received_at=at),))
    RewardService(log).record(ep)
    return ep.id


def _listed(log: EpisodeLog, flt: EpisodeFilter) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = log.list_episodes(flt, cursor=cursor, limit=2)
        ids += [e.id for e in page.items]
        if page.next_cursor is None:
            return sorted(ids)
        cursor = page.next_cursor


def test_the_failed_filter_lists_the_same_episodes_through_the_index(log: EpisodeLog) -> None:
    start = datetime(2025, 3, 1, 12, tzinfo=UTC)
    failed = [_logged(log, start + timedelta(minutes=i), FAILED_TURN_SOURCE) for i in range(0, 12, 3)]
    ok = [_logged(log, start + timedelta(minutes=i), None) for i in range(1, 12, 3)]
    ok.append(_logged(log, start + timedelta(minutes=20), "user"))  # feedback of another source
    assert _listed(log, EpisodeFilter(failed=True)) == sorted(failed)
    assert _listed(log, EpisodeFilter(failed=False)) == sorted(ok)
