"""One rule attributes a logged policy version to the snapshot it grew from (storage's
``snapshot_group``): ``policies list`` counts decisions with it and a missing snapshot is explained
with it; a model trained apart gets a version no decision or snapshot of the log already uses."""

from __future__ import annotations

from dataclasses import replace

import pytest

from factories import candidates, uniform_selection
from memabra import Episode, PolicySnapshot, UnknownSnapshotError
from memabra.storage import EpisodeLog, LearnerStore, SnapshotIndex, snapshot_group, unused_snapshot_version


def test_a_version_belongs_to_the_latest_snapshot_of_its_root_at_or_below_its_updates() -> None:
    snapshots = {"linear-71c5+100", "linear-71c5+170"}
    assert snapshot_group("linear-71c5+100", snapshots) == "linear-71c5+100"
    assert snapshot_group("linear-71c5+150", snapshots) == "linear-71c5+100"
    assert snapshot_group("linear-71c5+169", snapshots) == "linear-71c5+100"
    assert snapshot_group("linear-71c5+5000", snapshots) == "linear-71c5+170"
    # before any snapshot: the configuration, which is no snapshot
    assert snapshot_group("linear-71c5+99", snapshots) == "linear-71c5"
    assert snapshot_group("linear-71c5", snapshots) == "linear-71c5"
    # a router restored from snapshot V logs V+1, V+2, ...
    assert snapshot_group("linear-71c5+170+3", snapshots) == "linear-71c5+170"
    assert snapshot_group("vw-abc+17", {"vw-abc"}) == "vw-abc"
    index = SnapshotIndex(snapshots)
    assert index.snapshot_of("linear-71c5+150") == "linear-71c5+100"
    assert index.snapshot_of("linear-71c5+3") is None


def _log_versions(log: EpisodeLog, versions: list[str]) -> None:
    offered = candidates(n=3)
    episodes = []
    for v in versions:
        sel = replace(uniform_selection("ann", offered, ["m0"]), policy="linear", policy_version=v)
        episodes.append(Episode(user_id="ann", query=sel.context.query, selections=(sel,)))
    log.log_episodes(episodes)


def _online_log(log: EpisodeLog) -> None:
    """An online learner's log: 190 decisions, +0 to +169 (some twice), snapshots at +100 and +170."""
    versions = (
        ["linear-71c5"] + [f"linear-71c5+{n}" for n in range(1, 170)] + [f"linear-71c5+{n}" for n in range(150, 170)]
    )
    _log_versions(log, versions)
    log.save_snapshot(PolicySnapshot("linear", "linear-71c5+100", b"x", status="retired"))
    log.save_snapshot(PolicySnapshot("linear", "linear-71c5+170", b"y", parent="linear-71c5+100", status="active"))


def test_decisions_served_count_for_the_snapshot_they_grew_from(log: EpisodeLog) -> None:
    _online_log(log)
    served = LearnerStore(log.engine).decisions_served()
    assert served == {"linear-71c5": 100, "linear-71c5+100": 90}
    assert sum(served.values()) == log.count_episodes() == 190


def test_a_missing_snapshot_says_which_snapshot_its_decisions_grew_from(log: EpisodeLog) -> None:
    _online_log(log)
    with pytest.raises(UnknownSnapshotError, match="online update of snapshot 'linear-71c5\\+100'") as raised:
        log.get_snapshot("linear-71c5+169")
    assert "pruned" not in str(raised.value)
    with pytest.raises(UnknownSnapshotError, match="no saved snapshot holds its model"):
        log.get_snapshot("linear-71c5+50")
    with pytest.raises(
        UnknownSnapshotError, match="no policy snapshot with version 'linear-9', and no logged decision"
    ):
        log.get_snapshot("linear-9")


def test_a_model_trained_apart_gets_a_version_nothing_in_the_log_uses(log: EpisodeLog) -> None:
    _online_log(log)
    assert unused_snapshot_version(log, "linear-71c5+152") == "linear-71c5+152~2"  # decisions use it
    assert unused_snapshot_version(log, "linear-71c5+170") == "linear-71c5+170~2"  # a snapshot uses it
    # unused, but inside the lineage: it would be credited with what the lineage logs from +900 on
    assert unused_snapshot_version(log, "linear-71c5+900") == "linear-71c5+900~2"
    assert unused_snapshot_version(log, "linear-71c6+152") == "linear-71c6+152"  # no such lineage
    assert unused_snapshot_version(log, "linear_71c5+152") == "linear_71c5+152"  # "_" is no wildcard
    log.save_snapshot(PolicySnapshot("linear", "linear-71c5+152~2", b"z"))
    assert unused_snapshot_version(log, "linear-71c5+152") == "linear-71c5+152~3"
    # the suffixed name never captures the lineage's decisions
    assert snapshot_group("linear-71c5+152", {s.version for s in log.list_snapshots()}) == "linear-71c5+100"


def test_a_model_trained_apart_at_an_unused_count_is_not_credited_with_the_lineage_s_decisions(
    log: EpisodeLog,
) -> None:
    """Training from the log reaches ``root+n`` for the n decisions it read; between two of the
    lineage's snapshots that name was free, and the policies page credited the candidate with the
    lineage's decisions from +n on (found by a reviewer: 53 decisions it never served)."""
    # a learner's version moves by the rewards it learns, not by decisions: the log skips counts
    _log_versions(log, [f"linear-71c5+{n}" for n in range(100, 200, 10)])
    log.save_snapshot(PolicySnapshot("linear", "linear-71c5+100", b"x", status="active"))
    version = unused_snapshot_version(log, "linear-71c5+145")
    log.save_snapshot(PolicySnapshot("linear", version, b"t", parent="linear-71c5+100", status="candidate"))
    assert LearnerStore(log.engine).decisions_served() == {"linear-71c5+100": 10}


def test_the_episode_listing_keeps_the_episodes_a_snapshot_served(
    log: EpisodeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``EpisodeFilter(snapshot=V)`` counts as the policies page does: V's own version and every
    online update that grew from it, where ``policy_version`` is one version exactly."""
    from memabra._errors import InvalidRecordError
    from memabra.storage import EpisodeFilter, _episode_listing

    monkeypatch.setattr(_episode_listing, "_IN_CHUNK", 7)  # 70 versions: ten IN lists
    _online_log(log)
    grown = log.list_episodes(EpisodeFilter(snapshot="linear-71c5+100"), limit=1000, count=True)
    assert grown.total == 90 == LearnerStore(log.engine).decisions_served()["linear-71c5+100"]
    assert {s.policy_version for s in grown.items} == {f"linear-71c5+{n}" for n in range(100, 170)}
    assert log.list_episodes(EpisodeFilter(snapshot="linear-71c5+170"), count=True).total == 0
    assert log.list_episodes(EpisodeFilter(policy_version="linear-71c5+100"), count=True).total == 1
    with pytest.raises(InvalidRecordError, match="snapshot: no policy snapshot with version 'linear-9'"):
        log.list_episodes(EpisodeFilter(snapshot="linear-9"))


def test_episodes_list_takes_a_snapshot_and_says_how_many_match(log: EpisodeLog, migrated_url: str) -> None:
    from typer.testing import CliRunner

    from memabra._cli import app

    _online_log(log)
    args = ["episodes", "list", "--db", migrated_url, "--limit", "5"]
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, [*args, "--snapshot", "linear-71c5+100"])
    assert result.exit_code == 0 and "episodes (90 match)" in result.output
    unknown = CliRunner().invoke(app, [*args, "--snapshot", "linear-9"])
    assert unknown.exit_code == 1 and "no policy snapshot with version 'linear-9'" in unknown.output
