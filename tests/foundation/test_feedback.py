from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from factories import episode
from memabra import Feedback, FeedbackError, InvalidRecordError, RewardWeights, UnknownEpisodeError
from memabra._feedback import RewardService, recompute_rewards
from memabra._records import utcnow
from memabra._reward import RewardConfig
from memabra.storage import EpisodeFilter, EpisodeLog
from memabra.storage._models import FeedbackRow


def _service(log: EpisodeLog, minutes: float = 10) -> RewardService:
    return RewardService(log, RewardConfig(feedback_window=timedelta(minutes=minutes)))


def _count_feedback(log: EpisodeLog) -> int:
    with log.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(FeedbackRow)).scalar() or 0)


def test_feedback_inside_the_window_updates_the_reward_and_is_learned_once(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode()
    provisional = svc.record(ep)
    assert provisional.components.s == 0.5
    receipt = svc.post_feedback(Feedback(ep.id, "explicit", "user", {"correct": False, "correction": True}))
    assert receipt.status == "stored"
    stored = log.get_reward(ep.id)
    assert stored is not None and stored.components.s == 0.0 and stored.components.c == 1.0
    assert svc.claim_learning() == []  # still provisional: the window is open
    assert svc.finalize_due(utcnow() + timedelta(minutes=11)) == 1
    items = svc.claim_learning()
    assert [i.episode_id for i in items] == [ep.id]
    assert items[0].reward.components.c == 1.0
    assert items[0].selections == ep.selections
    assert svc.claim_learning() == []  # never twice
    assert log.list_episodes().items[0].corrected


def test_default_reward_applies_after_the_window_without_feedback(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode()
    svc.record(ep)
    assert svc.finalize_due(utcnow()) == 0
    assert svc.finalize_due(utcnow() + timedelta(minutes=10, seconds=1)) == 1
    final = log.get_episode(ep.id)
    assert final.finalized_at is not None
    assert final.reward is not None and final.reward.components.s == RewardConfig().default_success


def test_late_feedback_is_stored_marked_and_never_learned(log: EpisodeLog) -> None:
    svc = _service(log, minutes=0)
    ep = episode()
    svc.record(ep)
    svc.finalize_due(utcnow() + timedelta(seconds=1))
    learned = svc.claim_learning()
    assert len(learned) == 1
    before = log.get_reward(ep.id)
    receipt = svc.post_feedback(Feedback(ep.id, "explicit", "user", {"correct": False}))
    assert receipt.status == "late"
    assert log.get_reward(ep.id) == before
    assert svc.claim_learning() == []
    stored = log.get_episode(ep.id).feedback
    assert len(stored) == 1 and stored[0].late


def test_feedback_after_the_deadline_is_late_before_any_finalise_pass(log: EpisodeLog) -> None:
    """The window is the episode's stored deadline: feedback after it is late even though no
    finalise pass closed the episode yet, and the reward is made final with what it had."""
    svc = _service(log)
    ep = episode(chosen=("m0",), created_at=utcnow() - timedelta(minutes=11))
    provisional = svc.record(ep)
    late = Feedback(ep.id, "explicit", "user", {"correct": False, "correction": True, "relevant_ids": ["m3"]})
    receipt = svc.post_feedback(late)
    assert receipt.status == "late" and not receipt.applied
    final = log.get_episode(ep.id)
    assert final.finalized_at is not None
    assert final.reward is not None and final.reward.components == provisional.components
    assert len(final.feedback) == 1 and final.feedback[0].late
    assert not log.list_episodes().items[0].corrected
    assert svc.finalize_due(utcnow() + timedelta(minutes=30)) == 0  # already final
    (item,) = svc.claim_learning()
    assert item.reward.components == provisional.components and item.missing == ()


def test_late_feedback_without_a_scorer_is_never_scored(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode(created_at=utcnow() - timedelta(minutes=11))
    provisional = svc.record(ep)
    receipt = log.add_feedback(Feedback(ep.id, "explicit", "user", {"correct": False, "correction": True}))
    assert receipt.status == "late"
    assert log.get_episode(ep.id).finalized_at is None  # closed by the next finalise pass
    assert svc.finalize_due() == 1
    final = log.get_reward(ep.id)
    assert final is not None and final.components == provisional.components
    assert not log.list_episodes().items[0].corrected


def test_a_late_correction_does_not_mark_the_episode_corrected(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode()
    svc.record(ep)
    assert svc.post_feedback(Feedback(ep.id, "explicit", "user", {"success": 1.0, "final": True})).applied
    receipt = svc.post_feedback(Feedback(ep.id, "explicit", "user", {"correction": "I said Lyon"}))
    assert receipt.status == "late"
    reward = log.get_reward(ep.id)
    assert reward is not None and reward.components.c == 0.0
    assert not log.list_episodes().items[0].corrected
    assert log.list_episodes(EpisodeFilter(corrected=True)).items == ()


def test_the_same_feedback_twice_is_a_no_op(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode()
    svc.record(ep)
    first = svc.post_feedback(Feedback(ep.id, "explicit", "user", {"rating": 5}, idempotency_key="k-1"))
    second = svc.post_feedback(Feedback(ep.id, "explicit", "user", {"rating": 1}, idempotency_key="k-1"))
    assert (first.status, second.status) == ("stored", "duplicate")
    assert second.feedback_id == first.feedback_id
    assert _count_feedback(log) == 1
    assert log.get_reward(ep.id).components.s == 1.0  # type: ignore[union-attr]


def test_final_flag_closes_the_window_at_once(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode()
    svc.record(ep)
    svc.post_feedback(Feedback(ep.id, "programmatic", "checker", {"accepted": True, "final": True}))
    assert [i.episode_id for i in svc.claim_learning()] == [ep.id]


def test_bad_feedback_writes_nothing(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode()
    svc.record(ep)
    with pytest.raises(UnknownEpisodeError, match="no known episode"):
        svc.post_feedback(Feedback("missing", "explicit", "user", {"correct": True}))
    with pytest.raises(FeedbackError, match="unknown feedback key"):
        svc.post_feedback(Feedback(ep.id, "explicit", "user", {"bogus": 1}))
    with pytest.raises(FeedbackError, match="not part of episode"):
        svc.post_feedback(Feedback(ep.id, "explicit", "user", {"correct": True}, decision_id="nope"))
    with pytest.raises(InvalidRecordError, match="feedback kind must be one of explicit, implicit, programmatic"):
        Feedback(ep.id, "shouting", "user", {})  # type: ignore[arg-type]
    assert _count_feedback(log) == 0


def test_used_ids_feedback_sets_local_outcomes(log: EpisodeLog) -> None:
    svc = _service(log)
    ep = episode(chosen=("m0", "m2"))
    svc.record(ep)
    svc.post_feedback(Feedback(ep.id, "implicit", "runtime", {"used_ids": ["m2"]}))
    svc.finalize_due(utcnow() + timedelta(minutes=11))
    (item,) = svc.claim_learning()
    assert item.outcomes == {"m0": 0.0, "m2": 1.0}


def test_recompute_rewards_in_the_log(log: EpisodeLog) -> None:
    svc = _service(log)
    eps = [episode() for _ in range(3)]
    for e in eps:
        svc.record(e)
        svc.post_feedback(Feedback(e.id, "explicit", "user", {"correction": True}))
    before = log.get_reward(eps[0].id)
    assert before is not None
    n = recompute_rewards(log, RewardWeights(wc=1.0), version="v1-heavy-c")
    assert n == 3
    after = log.get_reward(eps[0].id)
    assert after is not None and after.components == before.components
    assert after.total == pytest.approx(before.total - 0.6)
    assert after.version == "v1-heavy-c"
    assert log.list_episodes().items[0].reward_total == pytest.approx(after.total)


def test_mempo_labels_feed_the_memory_hit_term(log: EpisodeLog) -> None:
    from memabra._records import MemoryQuality

    svc = _service(log)
    good, bad = episode(), episode()
    for e in (good, bad):
        svc.record(e)
    log.store_memory_scores(
        [
            MemoryQuality(good.selections[0].id, "mempo:test", 0.9, 0.8, 0.1, 1, 3),
            MemoryQuality(bad.selections[0].id, "mempo:test", 0.1, 0.8, -0.7, -1, 3),
        ]
    )
    assert recompute_rewards(log, RewardWeights(), use_memory_scores=True) == 2
    g, b = log.get_reward(good.id), log.get_reward(bad.id)
    assert g is not None and b is not None
    assert (g.components.hm, b.components.hm) == (1.0, -1.0)
    assert g.total - b.total == pytest.approx(0.35 * 2)


def test_an_episode_with_several_labelled_decisions_takes_their_mean_label(log: EpisodeLog) -> None:
    """Hm is the episode's: with one MemPO label per decision, no single decision's stands for it."""
    from dataclasses import replace

    from factories import candidates, uniform_selection
    from memabra._records import MemoryQuality

    two = episode()
    second = uniform_selection("u1", candidates(n=5), ("m1",))
    two = replace(two, selections=(two.selections[0], second))
    _service(log).record(two)
    first_id, second_id = (s.id for s in two.selections)
    log.store_memory_scores(
        [
            MemoryQuality(first_id, "mempo:test", 0.9, 0.8, 0.1, 1, 3),
            MemoryQuality(second_id, "mempo:test", 0.1, 0.8, -0.7, -1, 3),
        ]
    )
    assert log.memory_labels() == {two.id: 0.0}
