"""Two models score the same log (a small one nightly, a large one weekly): each keeps its own
labels. The log kept one label per decision, so each run replaced the other's labels, the other's
next run scored them all again, and each scorer's labels were only what the other had not redone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memabra import ConfigError, InvalidRecordError
from memabra._records import MemoryQuality
from memabra.storage import EpisodeLog

from .test_mempo_log_reads import _episode

SMALL, LARGE = "mempo:qwen-0.5b", "mempo:qwen-7b"


def _gold_decisions(log: EpisodeLog, n: int) -> list[str]:
    """``n`` episodes whose one decision offered memories, each with a gold answer."""
    from memabra import Feedback

    episodes = [_episode(f"question {i}") for i in range(n)]
    log.log_episodes(episodes)
    for ep in episodes:
        log.add_feedback(Feedback(ep.id, "programmatic", "checker", {"gold_answer": "memory"}))
    return [ep.selections[0].id for ep in episodes]


def _label(decision_id: str, scorer: str, reward: int) -> MemoryQuality:
    return MemoryQuality(decision_id, scorer, 0.5, 0.5, 0.0 if reward == 1 else -0.25, reward, 3)


def test_two_scorers_keep_their_own_labels_of_the_same_decisions(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        ids = _gold_decisions(log, 3)
        log.store_memory_scores([_label(d, SMALL, 1) for d in ids])
        log.store_memory_scores([_label(d, LARGE, -1) for d in ids])
        # each scorer's rerun finds nothing left: the other's labels replaced none of its own
        assert log.count_mempo_items(unscored_by=SMALL) == 0
        assert log.count_mempo_items(unscored_by=LARGE) == 0
        assert log.memory_label_scorers() == {LARGE: 3, SMALL: 3}
        assert {d: q.reward for d, q in log.memory_scores(ids, scorer=SMALL).items()} == dict.fromkeys(ids, 1)
        assert {d: q.reward for d, q in log.memory_scores(ids, scorer=LARGE).items()} == dict.fromkeys(ids, -1)
        assert [(q.decision_id, q.scorer) for q in log.all_memory_scores(ids)] == sorted(
            (d, s) for d in ids for s in (LARGE, SMALL)
        )
        # a rescore replaces the rescoring scorer's labels only
        log.store_memory_scores([_label(ids[0], SMALL, -1)])
        assert log.memory_scores([ids[0]], scorer=SMALL)[ids[0]].reward == -1
        assert log.memory_scores([ids[0]], scorer=LARGE)[ids[0]].reward == -1
        assert log.memory_label_scorers() == {LARGE: 3, SMALL: 3}
        # episode labels read one scorer's
        assert set(log.memory_labels(scorer=LARGE).values()) == {-1.0}
        assert sorted(log.memory_labels(scorer=SMALL).values()) == [-1.0, 1.0, 1.0]
        with pytest.raises(ConfigError, match=r"labels of 2 scorers are stored .*pass scorer="):
            log.memory_labels()  # an episode's mean of two models' verdicts says what neither said


def test_reading_by_decision_alone_where_two_scorers_labelled_it_names_them(migrated_url: str) -> None:
    """Decision id to label is one label per decision: read without a scorer, a decision two
    scorers labelled is refused with both names, not answered with either at random."""
    with EpisodeLog(migrated_url) as log:
        ids = _gold_decisions(log, 2)
        log.store_memory_scores([_label(ids[0], SMALL, 1), _label(ids[1], LARGE, 1)])
        assert {d: q.scorer for d, q in log.memory_scores(ids).items()} == {ids[0]: SMALL, ids[1]: LARGE}
        log.store_memory_scores([_label(ids[0], LARGE, 1)])
        with pytest.raises(ConfigError, match=re.escape(f"labels of 2 scorers ({SMALL}, {LARGE}): pass scorer=")):
            log.memory_scores(ids)


def test_a_batch_naming_one_decision_twice_for_one_scorer_is_refused_whole(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        ids = _gold_decisions(log, 2)
        log.store_memory_scores([_label(ids[1], SMALL, 1)])
        twice = [_label(ids[0], SMALL, 1), _label(ids[1], SMALL, -1), _label(ids[0], SMALL, -1)]
        with pytest.raises(InvalidRecordError, match=f"decision {ids[0]!r} twice for scorer {SMALL!r}"):
            log.store_memory_scores(twice)
        assert {d: q.reward for d, q in log.memory_scores(ids, scorer=SMALL).items()} == {ids[1]: 1}


def test_deleting_an_episode_deletes_every_scorer_label_of_its_decisions(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        ids = _gold_decisions(log, 2)
        log.store_memory_scores([_label(d, s, 1) for d in ids for s in (SMALL, LARGE)])
        (first,) = (e for e in log.list_episodes(limit=10).items if log.get_episode(e.id).selections[0].id == ids[0])
        assert log.delete_episodes([first.id], include_unlearned=True).deleted == 1
        assert log.memory_label_scorers() == {SMALL: 1, LARGE: 1}
        assert [(q.decision_id, q.scorer) for q in log.all_memory_scores(ids)] == [(ids[1], SMALL), (ids[1], LARGE)]


def test_recompute_takes_hm_from_the_named_scorers_labels_of_decisions_both_scored(migrated_url: str) -> None:
    from datetime import timedelta

    from typer.testing import CliRunner

    from factories import episode
    from memabra._cli import app
    from memabra._feedback import RewardService
    from memabra._reward import RewardConfig

    with EpisodeLog(migrated_url) as log:
        service = RewardService(log, RewardConfig(feedback_window=timedelta(minutes=10)))
        episodes = [episode(), episode()]
        for e in episodes:
            service.record(e)
        ids = [e.selections[0].id for e in episodes]
        log.store_memory_scores([_label(d, SMALL, 1) for d in ids])
        log.store_memory_scores([_label(d, LARGE, -1) for d in ids])  # used to replace SMALL's
    args = ["rewards", "recompute", "--weights", "wc=1.0", "--use-mempo", "--db", migrated_url, "--mempo-scorer"]
    runner = CliRunner(env={"COLUMNS": "200"})
    for name, hm in ((SMALL, 1.0), (LARGE, -1.0)):
        done = runner.invoke(app, [*args, name])
        assert done.exit_code == 0 and "(2 with Hm from a MemPO label)" in done.output, done.output
        with EpisodeLog(migrated_url) as log:
            assert [log.get_reward(e.id).components.hm for e in episodes] == [hm, hm]  # type: ignore[union-attr]


def test_episodes_show_json_carries_every_scorers_labels_as_the_admin_download_does(
    migrated_url: str, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from memabra._cli import app

    with EpisodeLog(migrated_url) as log:
        [decision] = _gold_decisions(log, 1)
        log.store_memory_scores([_label(decision, SMALL, 1), _label(decision, LARGE, -1)])
        [episode_id] = [ep.id for ep in log.list_episodes().items]
    out = tmp_path / "episode.json"
    result = CliRunner().invoke(app, ["episodes", "show", episode_id, "--db", migrated_url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    [shown] = json.loads(out.read_text())["decisions"]
    assert [(q["scorer"], q["reward"]) for q in shown["mempo"]] == [(SMALL, 1), (LARGE, -1)]  # by scorer name
