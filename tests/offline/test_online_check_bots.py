"""``memabra ope online`` on a log two bots share: each routes under its own policy name, and a
snapshot is served by its own policy's bot only. The check says whose decisions each side
counted, and that a run of every bot's traffic (or of another bot's) is not the traffic the
snapshot served."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from typer.testing import CliRunner

from logged_world import log_world, world
from memabra import Episode
from memabra._cli import app
from memabra._records import RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.evals.offline import check_online, evaluate_on_log
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog

runner = CliRunner(env={"COLUMNS": "240"})
B = "random-b"


class SalesRouter(RandomRouter):
    """The second bot: a router of its own name, so its decisions (and snapshots) are its own."""

    name: ClassVar[str] = "sales"


def _shared_log(log: EpisodeLog, lexical: Similarity) -> None:
    """Both bots' traffic in one log, then snapshot B of the first bot's policy (``random``)."""
    log_world(log, RandomRouter(similarity=lexical, seed=1), 120)
    log_world(log, SalesRouter(similarity=lexical, seed=3), 120)
    log.save_snapshot(replace(RandomRouter(similarity=lexical, seed=2).snapshot(), version=B))


def _run(log: EpisodeLog, lexical: Similarity, logged_by: list[str] | None) -> str:
    router = RandomRouter.restore(log.get_snapshot(B), similarity=lexical)
    ev = evaluate_on_log(
        log, router, policy=f"snapshot:{B}", snapshot_version=B, estimators=["cdr"], logged_by=logged_by
    )
    log.record_ope_results(list(ev.results))
    return ev.results[0].run_id


def _serve(log: EpisodeLog, lexical: Similarity, n: int = 40) -> None:
    """The first bot serving B, each decision rewarded 0.2 (final)."""
    router = RandomRouter.restore(log.get_snapshot(B), similarity=lexical)
    episodes = []
    for i in range(n):
        ctx, cands, _ = world(i)
        reward = RewardBreakdown(RewardComponents(s=0.2 + (0.02 if i % 2 else -0.02)), RewardWeights())
        episodes.append(
            Episode("u1", ctx.query, selections=(router.choose(ctx, cands),), reward=reward, finalized_at=utcnow())
        )
    log.log_episodes(episodes)


def test_a_run_of_every_bots_traffic_is_not_like_with_like(
    migrated_url: str, lexical: Similarity, tmp_path: Path
) -> None:
    with EpisodeLog(migrated_url) as log:
        _shared_log(log, lexical)
        run_id = _run(log, lexical, None)
        _serve(log, lexical)
    out = tmp_path / "online.json"
    result = runner.invoke(app, ["ope", "online", run_id[:8], "--db", migrated_url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["served_by"] == "random"
    assert doc["run_read"] == {"logged_by": ["random", "sales"], "chosen": False}
    assert doc["n_offline"] == 240 and doc["n_online"] == 40
    first = doc["notes"][0]
    assert first.startswith("not like with like: the run read every policy's decisions in its window (random, sales)")
    assert f"ope log --logged-by random --policy snapshot:{B}" in first
    text = " ".join(result.output.split())
    assert "counted: offline, every policy's decisions in its window (random, sales);" in text
    assert f"online, the decisions of {B} and its online updates served by random" in text
    assert "40 decisions served by random with a final reward" in text


def test_a_run_of_the_serving_bots_own_decisions_is_like_with_like(log: EpisodeLog, lexical: Similarity) -> None:
    _shared_log(log, lexical)
    run_id = _run(log, lexical, ["random"])
    _serve(log, lexical)
    check = check_online(log, run_id)
    assert check.served_by == "random" and check.run_read_by == ("random",) and check.run_chose_policies
    assert check.n_offline == 120
    assert not any("like with like" in note for note in check.notes), check.notes


def test_a_run_of_another_bots_decisions_says_whose_they_were(log: EpisodeLog, lexical: Similarity) -> None:
    _shared_log(log, lexical)
    run_id = _run(log, lexical, ["sales"])
    _serve(log, lexical)
    check = check_online(log, run_id)
    assert check.run_read_by == ("sales",) and check.run_chose_policies
    assert check.notes[0].startswith(
        f"the run read decisions logged by sales; online, {B} was served by random: like with like only if "
        "random now serves the traffic sales served"
    )


def test_a_one_bot_log_reads_as_that_bots_decisions(log: EpisodeLog, lexical: Similarity) -> None:
    """Without --logged-by on a log of one bot: the run read that policy's decisions, no note."""
    log_world(log, RandomRouter(similarity=lexical, seed=1), 120)
    log.save_snapshot(replace(RandomRouter(similarity=lexical, seed=2).snapshot(), version=B))
    run_id = _run(log, lexical, None)
    _serve(log, lexical)
    check = check_online(log, run_id)
    assert check.run_read_by == ("random",) and not check.run_chose_policies
    assert not any("like with like" in note for note in check.notes), check.notes
