"""Episodes with final rewards written straight to a log, for the learner tests and the load test."""

from __future__ import annotations

from logged_world import reward_of, world
from memabra import Episode
from memabra._records import utcnow
from memabra.router import RandomRouter, Router
from memabra.storage import EpisodeLog


def log_final(
    log: EpisodeLog, n: int, *, start: int = 0, router: Router | None = None, final: bool = True
) -> list[str]:
    """``n`` one-decision episodes (chosen by ``router``, random by default) with their reward, final
    unless ``final=False``; returns their ids."""
    router = router or RandomRouter(seed=start)
    ids = []
    for i in range(start, start + n):
        ctx, cands, relevant = world(i)
        selection = router.choose(ctx, cands)
        episode = Episode(
            user_id=ctx.user_id,
            query=ctx.query,
            selections=(selection,),
            reward=reward_of(selection, relevant),
            finalized_at=utcnow() if final else None,
            used_ids=frozenset({relevant} & set(selection.chosen_ids)),
        )
        log.log_episode(episode)
        ids.append(episode.id)
    return ids
