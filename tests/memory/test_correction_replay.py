"""Issue 12, item 5: the README's correction flow replayed for 300 episodes with the stand-in
model ("I already told you: ...", then the user's rating) does not poison memory."""

from __future__ import annotations

import statistics

import pytest

from memabra._demo import run_demo
from memabra.router import VWRouter
from memabra.storage import EpisodeLog


@pytest.mark.slow
def test_three_hundred_episodes_of_corrections_keep_memory_clean(log: EpisodeLog) -> None:
    rows = run_demo(router=VWRouter(seed=0), log=log, episodes=300, seed=0, users=10)
    first = statistics.fmean(r.hit_rate for r in rows[:50])
    last = statistics.fmean(r.hit_rate for r in rows[-50:])
    assert last >= first, (first, last)
    users = {r.user_id for r in rows}
    for user in users:
        texts = [r.text.lower() for r in log.items(user) if r.kind.value == "memory"]
        assert not any("told you" in t or "as i said" in t for t in texts), texts
        assert len(texts) == len(set(texts))
