"""Fixtures over the logged world of :mod:`logged_world`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from logged_world import log_world
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog


@pytest.fixture
def lexical() -> Similarity:
    return Similarity(encoder=None)


@pytest.fixture
def fill_log(lexical: Similarity) -> Callable[..., None]:
    def fill(log: EpisodeLog, n: int = 600, seed: int = 1) -> None:
        log_world(log, RandomRouter(similarity=lexical, seed=seed), n)

    return fill
