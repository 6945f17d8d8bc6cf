"""What the router earns, per policy and snapshot served, over the last hour of final rewards:
``EpisodeLog.status().reward_window``, ``memabra status`` (table and ``--json``) and its
Prometheus gauges, on every backend."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from foundation.test_metrics import parse_exposition, value
from typer.testing import CliRunner

from factories import candidates, uniform_selection
from memabra import Episode
from memabra._cli import app
from memabra._health import health_problems
from memabra._metrics import status_metrics
from memabra._records import PolicySnapshot, RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.storage import EpisodeLog, LogStatus, PolicyStatus
from memabra.storage._status import REWARD_WINDOW, SnapshotRewards

runner = CliRunner(env={"COLUMNS": "220"})
ODD = 'we"ird\\po\nlicy'


def _served(
    log: EpisodeLog,
    policy: str,
    version: str,
    components: RewardComponents,
    *,
    final_at: datetime | None,
    more_decisions: int = 0,
) -> RewardBreakdown:
    """One turn routed by ``policy`` at ``version``, its reward final at ``final_at`` (open: None);
    ``more_decisions`` later decisions of another version (the episode counts under its first)."""
    first = replace(uniform_selection("ann", candidates(), ("m0",)), policy=policy, policy_version=version)
    later = tuple(
        replace(uniform_selection("ann", candidates(), ("m1",)), policy=policy, policy_version="later-model")
        for _ in range(more_decisions)
    )
    reward = RewardBreakdown(components, RewardWeights())
    log.log_episode(Episode(user_id="ann", query="q", selections=(first, *later), reward=reward, finalized_at=final_at))
    return reward


def _snapshot(log: EpisodeLog, policy: str, version: str) -> None:
    log.save_snapshot(PolicySnapshot(policy=policy, version=version, model=b"model"))


def _fill(log: EpisodeLog) -> dict[str, list[RewardBreakdown]]:
    """Snapshot old -> new of policy vw (new promoted over old), plus a never-saved configuration
    of ODD. Returns the rewards each should count."""
    now = utcnow()
    _snapshot(log, "vw", "vw-old")
    log.promote("vw-old")
    _snapshot(log, "vw", "vw-new")
    log.promote("vw-new")
    counted: dict[str, list[RewardBreakdown]] = {"vw-old": [], "vw-new": [], "cfg": []}
    recent = now - timedelta(minutes=5)
    old = (
        RewardComponents(s=1.0, hm=1.0),
        RewardComponents(s=1.0, hm=0.5, e=0.2),
        RewardComponents(s=0.5, hm=0.0),
    )
    for components in old:
        counted["vw-old"].append(_served(log, "vw", "vw-old", components, final_at=recent))
    new = (
        RewardComponents(s=0.0, hm=-1.0, c=1.0),  # corrected and missed
        RewardComponents(s=0.5, hm=1.0, hs=-0.5),  # missed skills
        RewardComponents(s=0.0, c=0.5, e=0.75, ht=0.0),  # corrected, tool error
        RewardComponents(s=1.0, hm=1.0),
    )
    for i, components in enumerate(new):
        # online updates of the active snapshot count for it
        version = "vw-new" if i % 2 else f"vw-new+{i + 1}"
        counted["vw-new"].append(_served(log, "vw", version, components, final_at=recent, more_decisions=i % 2))
    counted["cfg"].append(_served(log, ODD, "cfg+3", RewardComponents(s=1.0, hm=1.0), final_at=recent))
    # neither counts: final before the window, not final yet
    _served(log, "vw", "vw-new", RewardComponents(s=-0.5, c=1.0), final_at=now - REWARD_WINDOW - timedelta(minutes=5))
    _served(log, "vw", "vw-new", RewardComponents(s=-0.5, c=1.0), final_at=None)
    return counted


def _expected(rewards: list[RewardBreakdown]) -> dict[str, float]:
    totals = [r.total for r in rewards]
    comps = [r.components for r in rewards]
    n = len(rewards)
    return {
        "rewards": n,
        "mean_reward": statistics.fmean(totals),
        "reward_stddev": statistics.stdev(totals) if n > 1 else 0.0,
        "mean_success": statistics.fmean(c.s for c in comps),
        "corrected_share": sum(c.c > 0 for c in comps) / n,
        "missed_share": sum(any(h is not None and h < 0 for h in (c.hm, c.hs, c.ht)) for c in comps) / n,
        "tool_error_share": sum(c.e > 0 for c in comps) / n,
    }


def _assert_figures(found: dict[str, float], rewards: list[RewardBreakdown]) -> None:
    for name, wanted in _expected(rewards).items():
        assert math.isclose(found[name], wanted, abs_tol=1e-9), (name, found[name], wanted)


def test_each_snapshot_served_has_the_figures_of_its_rewards_in_the_window(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        counted = _fill(log)
        state = log.status()
    assert state.rewards_since is not None and state.checked_at - state.rewards_since == REWARD_WINDOW
    by_key = {(w.policy, w.version): w for w in state.reward_window}
    assert sorted(by_key) == sorted([("vw", "vw-old"), ("vw", "vw-new"), (ODD, "cfg")])
    for (_policy, version), window in by_key.items():
        _assert_figures(
            {name: getattr(window, name) for name in SnapshotRewards.__dataclass_fields__}, counted[version]
        )
    vw = next(p for p in state.policies if p.policy == "vw")
    assert (vw.active_version, vw.previous_version) == ("vw-new", "vw-old")


def test_status_shows_the_window_in_its_table_json_and_prometheus_file(migrated_url: str, tmp_path: Path) -> None:
    with EpisodeLog(migrated_url) as log:
        counted = _fill(log)
    prom = tmp_path / "memabra.prom"
    out = runner.invoke(
        app, ["status", "--db", migrated_url, "--max-lag", "1d", "--json", "-", "--prometheus", str(prom)]
    )
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout[out.stdout.index("{") :])
    windows = {(w["policy"], w["version"]): w for w in document["status"]["reward_window"]}
    _assert_figures(windows[("vw", "vw-new")], counted["vw-new"])
    assert document["status"]["rewards_since"] is not None
    assert "rewards final in the last 1h, per snapshot served" in out.output
    assert "vw-new (active)" in out.output and "vw-old (previous)" in out.output
    assert out.output.index("vw-new (active)") < out.output.index("vw-old (previous)")

    families = parse_exposition(prom.read_text())
    assert value(families, "memabra_policy_window_seconds") == 3600
    for version, rewards in counted.items():
        policy = ODD if version == "cfg" else "vw"
        wanted = _expected(rewards)
        assert value(families, "memabra_policy_window_rewards", policy=policy, version=version) == len(rewards)
        for metric, field in (
            ("memabra_policy_window_reward_mean", "mean_reward"),
            ("memabra_policy_window_reward_stddev", "reward_stddev"),
            ("memabra_policy_window_success_mean", "mean_success"),
            ("memabra_policy_window_corrected_ratio", "corrected_share"),
            ("memabra_policy_window_missed_ratio", "missed_share"),
            ("memabra_policy_window_tool_error_ratio", "tool_error_share"),
        ):
            found = value(families, metric, policy=policy, version=version)
            assert math.isclose(found, wanted[field], abs_tol=1e-9), (metric, version)
    # only the snapshots that served in the window: no series per online update
    assert len(families["memabra_policy_window_rewards"].samples) == 3
    assert value(families, "memabra_policy_snapshot", policy="vw", version="vw-new", role="active") == 1
    assert value(families, "memabra_policy_snapshot", policy="vw", version="vw-old", role="previous") == 1
    assert len(families["memabra_policy_snapshot"].samples) == 2


def test_a_log_with_no_recent_final_reward_has_the_window_and_no_per_snapshot_series(
    migrated_url: str, tmp_path: Path
) -> None:
    with EpisodeLog(migrated_url) as log:
        _served(log, "vw", "v1", RewardComponents(s=1.0), final_at=utcnow() - timedelta(hours=3))
        assert log.status().reward_window == ()
    prom = tmp_path / "memabra.prom"
    out = runner.invoke(app, ["status", "--db", migrated_url, "--max-lag", "1d", "--prometheus", str(prom)])
    assert out.exit_code == 0, out.output
    assert "no reward became final in the last 1h" in out.output
    families = parse_exposition(prom.read_text())
    assert value(families, "memabra_policy_window_seconds") == 3600
    assert "memabra_policy_window_rewards" not in families
    assert "memabra_policy_snapshot" not in families


@pytest.mark.parametrize("version", ["v1", 'v"2\\\n'])
def test_window_labels_are_escaped(version: str) -> None:
    now = utcnow()
    policy = PolicyStatus(ODD, version, now, None, None, 0, None, 0, previous_version="v0")
    window = SnapshotRewards(ODD, version, 12, 0.25, 0.5, 0.75, 1 / 12, 0.5, 0.0)
    state = replace(
        LogStatus(now, "sqlite", "0014", 12, now, 0, 0, None, 0, None, (policy,), None),
        reward_window=(window,),
        rewards_since=now - REWARD_WINDOW,
    )
    text = status_metrics(
        state, problems=health_problems(state), max_lag=timedelta(minutes=15), duration_s=0.01, checked_at=now
    )
    families = parse_exposition(text)
    assert value(families, "memabra_policy_window_rewards", policy=ODD, version=version) == 12
    assert value(families, "memabra_policy_window_corrected_ratio", policy=ODD, version=version) == 1 / 12
    assert value(families, "memabra_policy_snapshot", policy=ODD, version=version, role="active") == 1
    assert value(families, "memabra_policy_snapshot", policy=ODD, version="v0", role="previous") == 1
    assert families["memabra_policy_window_reward_mean"].kind == "gauge"
