"""Fixtures over the logged world of :mod:`logged_world`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from logged_world import reward_of, world
from memabra import Episode
from memabra._records import utcnow
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog


@pytest.fixture
def lexical() -> Similarity:
    return Similarity(encoder=None)


@pytest.fixture
def fill_log(lexical: Similarity) -> Callable[..., None]:
    def fill(log: EpisodeLog, n: int = 600, seed: int = 1) -> None:
        router = RandomRouter(similarity=lexical, seed=seed)
        episodes = []
        for i in range(n):
            ctx, cands, relevant = world(i)
            sel = router.choose(ctx, cands)
            episodes.append(
                Episode("u1", ctx.query, selections=(sel,), reward=reward_of(sel, relevant), finalized_at=utcnow())
            )
        log.log_episodes(episodes)

    return fill
