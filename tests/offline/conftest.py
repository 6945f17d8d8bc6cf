"""Fixtures over the logged world of :mod:`logged_world`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from logged_world import Stopper, additive_reward_of, log_world
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog, upgrade


@pytest.fixture
def lexical() -> Similarity:
    return Similarity(encoder=None)


@pytest.fixture
def fill_log(lexical: Similarity) -> Callable[..., None]:
    def fill(log: EpisodeLog, n: int = 600, seed: int = 1) -> None:
        log_world(log, RandomRouter(similarity=lexical, seed=seed), n)

    return fill


@pytest.fixture(scope="module")
def additive_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EpisodeLog]:
    """1,500 decisions of a logger that stops at 0.3, every option positive, an additive reward."""
    url = f"sqlite:///{tmp_path_factory.mktemp('pi') / 'log.db'}"
    upgrade(url)
    with EpisodeLog(url) as log:
        log_world(log, Stopper(0.3, seed=1), 1500, reward=additive_reward_of, with_used=True)
        yield log
