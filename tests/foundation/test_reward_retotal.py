"""`rewards recompute` re-totals a page at a time: each reward consistent, memory bounded by a page."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

import memabra._feedback as feedback_module
from factories import episode
from memabra import Feedback, RewardWeights
from memabra._feedback import RewardService, recompute_rewards
from memabra._records import MemoryQuality, RewardBreakdown
from memabra._reward import RewardConfig, rescored
from memabra.storage import EpisodeLog
from memabra.storage import _retotal as retotal_module
from memabra.storage._models import EpisodeRow, RewardRow

HEAVY_C = RewardWeights(wc=1.0)


def _service(log: EpisodeLog) -> RewardService:
    return RewardService(log, RewardConfig(feedback_window=timedelta(minutes=10)))


def _stored_totals(log: EpisodeLog) -> dict[str, tuple[float, float]]:
    """Each episode's stored total, as its reward row and the episode row hold it (the columns,
    not RewardBreakdown.total, which is recomputed from the components on read)."""
    with log.engine.connect() as conn:
        rows = conn.execute(
            select(RewardRow.episode_id, RewardRow.total, EpisodeRow.reward_total).join(
                EpisodeRow, EpisodeRow.id == RewardRow.episode_id
            )
        ).all()
    return {episode_id: (total, episode_total) for episode_id, total, episode_total in rows}


def _assert_consistent(log: EpisodeLog) -> None:
    for episode_id, (total, episode_total) in _stored_totals(log).items():
        stored = log.get_reward(episode_id)
        assert stored is not None
        expected = rescored(stored, stored.weights).total  # the row's components under the row's weights
        assert total == pytest.approx(expected), f"reward of {episode_id} disagrees with its components"
        assert episode_total == pytest.approx(expected)


def test_feedback_that_lands_during_a_recompute_is_not_stamped_with_a_stale_total(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = _service(log)
    eps = [episode() for _ in range(3)]
    for e in eps:
        svc.record(e)
    target = eps[1]
    landed = threading.Event()
    errors: list[BaseException] = []

    def post() -> None:
        try:
            svc.post_feedback(Feedback(target.id, "explicit", "user", {"correction": True}))
        except BaseException as exc:  # reported by the test thread below
            errors.append(exc)
        finally:
            landed.set()

    thread = threading.Thread(target=post)
    real = feedback_module.rescored

    def rescored_while_feedback_arrives(
        stored: RewardBreakdown, weights: RewardWeights, *, memory_label: float | None = None
    ) -> RewardBreakdown:
        if not thread.is_alive() and not landed.is_set():
            # The feedback lands between the recompute's read and its write, unless the rewards
            # being re-totalled are locked against it (then it waits, and this wait times out).
            thread.start()
            landed.wait(timeout=1.0)
        return real(stored, weights, memory_label=memory_label)

    monkeypatch.setattr(feedback_module, "rescored", rescored_while_feedback_arrives)
    assert recompute_rewards(log, HEAVY_C) == 3
    thread.join(timeout=30)
    assert not thread.is_alive() and not errors
    after = log.get_reward(target.id)
    assert after is not None and after.components.c == 1.0  # the feedback was kept
    _assert_consistent(log)


def test_a_recompute_stopped_midway_keeps_the_pages_it_finished_and_a_rerun_finishes(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retotal_module, "RETOTAL_PAGE", 2)
    svc = _service(log)
    for _ in range(5):
        svc.record(episode())
    ids = sorted(_stored_totals(log))
    real = feedback_module.rescored
    calls = 0

    def failing_on_the_second_page(
        stored: RewardBreakdown, weights: RewardWeights, *, memory_label: float | None = None
    ) -> RewardBreakdown:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("killed")
        return real(stored, weights, memory_label=memory_label)

    monkeypatch.setattr(feedback_module, "rescored", failing_on_the_second_page)
    with pytest.raises(RuntimeError, match="killed"):
        recompute_rewards(log, HEAVY_C, version="heavy-c")
    versions = {i: log.get_reward(i).version for i in ids}  # type: ignore[union-attr]
    assert [versions[i] for i in ids] == ["heavy-c", "heavy-c", *[RewardConfig().version] * 3]
    _assert_consistent(log)

    monkeypatch.setattr(feedback_module, "rescored", real)
    assert recompute_rewards(log, HEAVY_C, version="heavy-c") == 5
    assert all(log.get_reward(i).version == "heavy-c" for i in ids)  # type: ignore[union-attr]
    assert all(log.get_reward(i).weights == HEAVY_C for i in ids)  # type: ignore[union-attr]
    _assert_consistent(log)


def test_labels_and_since_apply_across_pages(log: EpisodeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retotal_module, "RETOTAL_PAGE", 2)
    svc = _service(log)
    eps = [episode() for _ in range(5)]
    for e in eps:
        svc.record(e)
    by_id = sorted(eps, key=lambda e: e.id)
    good, bad = by_id[1], by_id[4]  # on the first and the last page
    log.store_memory_scores(
        [
            MemoryQuality(good.selections[0].id, "mempo:test", 0.9, 0.8, 0.1, 1, 3),
            MemoryQuality(bad.selections[0].id, "mempo:test", 0.1, 0.8, -0.7, -1, 3),
        ]
    )
    logged_hm = {e.id: log.get_reward(e.id).components.hm for e in by_id}  # type: ignore[union-attr]
    done = feedback_module.retotal_rewards(log, RewardWeights(), use_memory_scores=True)
    assert (done.rewards, done.labelled) == (5, 2)
    hm = {e.id: log.get_reward(e.id).components.hm for e in by_id}  # type: ignore[union-attr]
    assert (hm[good.id], hm[bad.id]) == (1.0, -1.0)
    assert all(hm[e.id] == logged_hm[e.id] for e in by_id if e not in (good, bad))
    _assert_consistent(log)
    later = feedback_module.retotal_rewards(log, HEAVY_C, since=max(e.created_at for e in eps) + timedelta(seconds=1))
    assert (later.rewards, later.labelled) == (0, 0)


def test_the_command_counts_the_labels_it_applied_and_says_how_a_stopped_run_finishes(migrated_url: str) -> None:
    from typer.testing import CliRunner

    from memabra._cli import app

    runner = CliRunner(env={"COLUMNS": "200"})
    with EpisodeLog(migrated_url) as log:
        labelled, plain = episode(), episode()
        for e in (labelled, plain):
            _service(log).record(e)
        log.store_memory_scores([MemoryQuality(labelled.selections[0].id, "mempo:test", 0.9, 0.8, 0.1, 1, 3)])
    args = ["rewards", "recompute", "--weights", "wc=1.0", "--use-mempo", "--db", migrated_url]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "recomputed 2 rewards" in result.output and "(1 with Hm from a MemPO label)" in result.output
    help_text = " ".join(runner.invoke(app, ["rewards", "recompute", "--help"]).output.split())
    assert "running it again finishes the job" in help_text


def test_the_whole_log_methods_still_work_and_say_they_are_deprecated(log: EpisodeLog) -> None:
    ep = episode()
    _service(log).record(ep)
    with pytest.warns(DeprecationWarning, match="stored_rewards is deprecated"):
        ((episode_id, stored),) = log.stored_rewards()
    with pytest.warns(DeprecationWarning, match="write_rewards is deprecated"):
        assert log.write_rewards({episode_id: stored}, HEAVY_C, version="heavy-c") == 1
    after = log.get_reward(ep.id)
    assert after is not None and after.weights == HEAVY_C and after.version == "heavy-c"
    _assert_consistent(log)
