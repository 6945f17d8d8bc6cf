"""MemPO's stored labels by episode, read a page at a time: the memory a reader holds is one page,
whatever the log's size, and the pages together are every label, each once."""

from __future__ import annotations

import pytest

from memabra import InvalidRecordError
from memabra._records import MemoryQuality
from memabra.storage import EpisodeLog

from .test_mempo_log_reads import _episode


def _labelled(log: EpisodeLog, n: int) -> dict[str, float]:
    """``n`` episodes, each with one labelled decision: +1 for the even ones, -1 for the odd."""
    episodes = [_episode(f"question {i}") for i in range(n)]
    log.log_episodes(episodes)
    rewards = [1 if i % 2 == 0 else -1 for i in range(n)]
    log.store_memory_scores(
        [
            MemoryQuality(ep.selections[0].id, "mempo:test", 0.5, 0.5, 0.0, reward, 3)
            for ep, reward in zip(episodes, rewards, strict=True)
        ]
    )
    return {ep.id: float(reward) for ep, reward in zip(episodes, rewards, strict=True)}


def test_labels_come_a_page_at_a_time_and_together_are_every_label(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        expected = _labelled(log, 7)
        pages = list(log.memory_label_pages(page_size=3))
        assert [len(page) for page in pages] == [3, 3, 1]
        assert {k: v for page in pages for k, v in page.items()} == expected
        assert log.memory_labels() == expected


@pytest.mark.parametrize("page_size", [0, -1, 2.5, True])
def test_a_page_size_that_is_not_a_positive_integer_is_refused_before_any_read(
    migrated_url: str, page_size: object
) -> None:
    with EpisodeLog(migrated_url) as log, pytest.raises(InvalidRecordError, match="page_size"):
        log.memory_label_pages(page_size=page_size)  # type: ignore[arg-type]
