"""Issue 12, item 5: the README's correction flow replayed for 300 episodes with the stand-in
model ("I already told you: ...", then the user's rating) does not poison memory: the needed
memories keep being found, and no memory holds a complaint's wording or a duplicate."""

from __future__ import annotations

import statistics

import pytest

from memabra import CandidateKind
from memabra._demo import run_demo
from memabra._demo_world import TASKS, World
from memabra.router import LinearRouter
from memabra.storage import EpisodeLog

EPISODES, USERS, SEED = 300, 10, 0


def _memory_hits(log: EpisodeLog, rows) -> list[float]:  # type: ignore[no-untyped-def]
    """Per episode whose task needs facts: the share of them (current values) injected."""
    world = World(seed=SEED, n_users=USERS, episodes=EPISODES)
    before = {u.id: dict(u.facts) for u in world.users}
    for user in world.users:
        world.drift(user)
    after = {u.id: dict(u.facts) for u in world.users}
    needs = {t.name: t.facts for t in TASKS}
    hits = []
    for row in rows:
        categories = needs[row.task]
        if not categories:
            continue
        facts = (before if row.index < world.drift_at else after)[row.user_id]
        chosen = log.get_episode(row.episode_id).selections[0].chosen
        texts = [c.text.lower() for c in chosen if c.kind is CandidateKind.MEMORY]
        hits.append(statistics.fmean(any(facts[c].value.lower() in t for t in texts) for c in categories))
    return hits


@pytest.mark.slow
def test_three_hundred_episodes_of_corrections_keep_memory_clean(log: EpisodeLog) -> None:
    # the default router, as the README's flow builds it (create_memabra_agent, memabra demo)
    rows = run_demo(router=LinearRouter(seed=0), log=log, episodes=EPISODES, seed=SEED, users=USERS)
    hits = _memory_hits(log, rows)
    first, last = statistics.fmean(hits[:50]), statistics.fmean(hits[-50:])
    assert last >= first, (first, last)
    for user in {r.user_id for r in rows}:
        texts = [i.text.lower() for i in log.items(user) if i.kind is CandidateKind.MEMORY]
        assert not any("told you" in t or "as i said" in t for t in texts), texts
        assert len(texts) == len(set(texts))
