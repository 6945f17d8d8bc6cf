"""Offline evaluation on a log that serving processes keep writing: both passes read it as of the
moment the evaluation began, and a change they cannot hide (a deletion) is an error, not a quietly
inconsistent estimate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from logged_world import log_world, reward_of, world
from memabra import Episode, LogChangedError
from memabra.evals.offline import Target, evaluate_policies
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog


def _values(log: EpisodeLog, lexical: Similarity) -> dict[str, float]:
    (ev,) = evaluate_policies(
        log, [Target("random", RandomRouter(similarity=lexical, seed=3))], estimators=["sips", "dm", "dr"]
    )
    return {**{name: e.value for name, e in ev.estimates.items()}, "n": float(ev.n_rounds)}


def _between_passes(monkeypatch: pytest.MonkeyPatch, log: EpisodeLog, change: Callable[[], None]) -> list[int]:
    """Run ``change`` when the evaluation starts its second pass over the log."""
    real = log.iter_decisions
    calls: list[int] = []

    def iter_decisions(**kwargs: Any) -> Iterator[Any]:
        calls.append(1)
        if len(calls) == 2:
            change()
        return real(**kwargs)

    monkeypatch.setattr(log, "iter_decisions", iter_decisions)
    return calls


def test_decisions_and_final_rewards_that_arrive_mid_evaluation_are_left_to_the_next_one(
    log: EpisodeLog, fill_log: Callable[..., None], lexical: Similarity, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill_log(log, n=600)
    router = RandomRouter(similarity=lexical, seed=4)
    pending = []
    for i in range(20):  # turns whose feedback window is still open: provisional rewards
        ctx, cands, relevant = world(1000 + i)
        sel = router.choose(ctx, cands)
        pending.append((Episode("u1", ctx.query, selections=(sel,), reward=reward_of(sel, relevant)), relevant))
    log.log_episodes([ep for ep, _ in pending])
    before = _values(log, lexical)

    def serve_meanwhile() -> None:
        log_world(log, RandomRouter(similarity=lexical, seed=9), 40)  # new traffic
        for ep, relevant in pending:  # feedback windows close: the rewards become final
            assert log.put_reward(ep.id, reward_of(ep.selections[0], relevant), final=True)

    calls = _between_passes(monkeypatch, log, serve_meanwhile)
    assert _values(log, lexical) == before
    assert len(calls) == 2
    monkeypatch.undo()
    assert _values(log, lexical)["n"] == before["n"] + 40 + 20  # the next evaluation reads them


def test_a_deletion_between_the_passes_is_reported_not_estimated_around(
    log: EpisodeLog, fill_log: Callable[..., None], lexical: Similarity, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill_log(log, n=600)
    newest = [e.id for e in log.list_episodes(limit=50).items]
    _between_passes(monkeypatch, log, lambda: log.delete_episodes(newest, include_unlearned=True) and None)
    with pytest.raises(LogChangedError, match="first pass read 600 rewarded decisions and the second 550"):
        _values(log, lexical)
