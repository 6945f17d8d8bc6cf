"""`rewards recompute --use-mempo` takes one scorer's labels: two models' labels are never mixed into Hm."""

from __future__ import annotations

from datetime import timedelta

from typer.testing import CliRunner

from factories import episode
from memabra._cli import app
from memabra._feedback import RewardService
from memabra._records import MemoryQuality
from memabra._reward import RewardConfig
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "200"})


def test_labels_of_two_scorers_are_refused_unless_one_is_named(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        service = RewardService(log, RewardConfig(feedback_window=timedelta(minutes=10)))
        first, second = episode(), episode()
        for e in (first, second):
            service.record(e)
        log.store_memory_scores(
            [
                MemoryQuality(first.selections[0].id, "mempo:a", 0.9, 0.8, 0.1, 1, 3),
                MemoryQuality(second.selections[0].id, "mempo:b", 0.1, 0.8, -0.7, -1, 3),
            ]
        )
        before = {e.id: log.get_reward(e.id) for e in (first, second)}
    args = ["rewards", "recompute", "--weights", "wc=1.0", "--use-mempo", "--db", migrated_url]

    mixed = runner.invoke(app, args)
    output = " ".join(mixed.output.split())
    assert mixed.exit_code == 1, output
    assert "MemPO labels of 2 scorers are stored (mempo:a (1 decisions), mempo:b (1 decisions))" in output
    assert "--mempo-scorer" in output
    with EpisodeLog(migrated_url) as log:  # refused before any page was written
        assert {e.id: log.get_reward(e.id) for e in (first, second)} == before

    unknown = runner.invoke(app, [*args, "--mempo-scorer", "mempo:c"])
    assert unknown.exit_code == 1 and "no MemPO labels are stored under scorer 'mempo:c'" in unknown.output

    without = runner.invoke(app, [*args[:4], "--db", migrated_url, "--mempo-scorer", "mempo:a"])
    assert without.exit_code == 1 and "give it with --use-mempo" in without.output

    named = runner.invoke(app, [*args, "--mempo-scorer", "mempo:a"])
    assert named.exit_code == 0, named.output
    assert "recomputed 2 rewards" in named.output and "(1 with Hm from a MemPO label)" in named.output
    with EpisodeLog(migrated_url) as log:
        assert log.get_reward(first.id).components.hm == 1.0  # type: ignore[union-attr]
        assert log.get_reward(second.id).components.hm == before[second.id].components.hm  # type: ignore[union-attr]


def test_labels_of_no_recomputed_reward_are_not_called_missing(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        service = RewardService(log, RewardConfig(feedback_window=timedelta(minutes=10)))
        labelled, unlabelled = episode(), episode()
        for e in (labelled, unlabelled):
            service.record(e)
        log.store_memory_scores([MemoryQuality(labelled.selections[0].id, "mempo:a", 0.9, 0.8, 0.1, 1, 3)])
    since = "2999-01-01T00:00:00+00:00"  # no episode is recent enough: no reward is recomputed
    out = runner.invoke(
        app, ["rewards", "recompute", "--weights", "wc=1.0", "--use-mempo", "--since", since, "--db", migrated_url]
    )
    text = " ".join(out.output.split())
    assert "no MemPO labels stored" not in text, text
    assert "no recomputed reward has a MemPO label (mempo:a's labels grade decisions of other episodes" in text


def test_the_reward_services_recompute_takes_the_scorer_its_refusal_asks_for(migrated_url: str) -> None:
    """``RewardService.recompute_rewards`` (public) refused two scorers' labels asking for
    ``memory_scorer``, which it did not take: a library caller had no way through it."""
    from memabra import ConfigError, RewardWeights

    with EpisodeLog(migrated_url) as log:
        service = RewardService(log, RewardConfig(feedback_window=timedelta(minutes=10)))
        first = episode()
        service.record(first)
        decision = first.selections[0].id
        log.store_memory_scores(
            [
                MemoryQuality(decision, "mempo:a", 0.9, 0.8, 0.1, 1, 3),
                MemoryQuality(decision, "mempo:b", 0.1, 0.8, -0.7, -1, 3),
            ]
        )
        try:
            service.recompute_rewards(RewardWeights(wc=1.0), use_memory_scores=True)
        except ConfigError as exc:
            assert "memory_scorer" in str(exc)
        else:
            raise AssertionError("two scorers' labels were mixed")
        assert service.recompute_rewards(RewardWeights(wc=1.0), use_memory_scores=True, memory_scorer="mempo:b") == 1
        assert log.get_reward(first.id).components.hm == -1.0  # type: ignore[union-attr]
