"""What offline evaluation reads from the log and how it says what is wrong with it: provisional
rewards, the time window, corrupted rows, tiny logs, the rollouts' seed and bad policy specs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from logged_world import log_world, reward_of, world
from memabra import ConfigError, Episode, InvalidRecordError
from memabra._cli import app
from memabra._records import utcnow
from memabra.evals.offline import (
    Target,
    evaluate_on_log,
    evaluate_policies,
    logged_value,
    resolve_policy,
    train_from_log,
)
from memabra.router import HybridRouter, LinearRouter, RandomRouter, Similarity
from memabra.storage import EpisodeLog, make_engine
from memabra.storage._models import DecisionRow, DecisionSlotRow, RewardRow

runner = CliRunner(env={"COLUMNS": "240"})
pytestmark = pytest.mark.slow


def _log_rounds(log: EpisodeLog, lexical: Similarity, start: int, n: int, *, final: bool) -> None:
    """``n`` rounds of the logged world from round ``start``, chosen at random, their rewards final
    or provisional (an episode without ``finalized_at`` is logged with a provisional reward)."""
    router = RandomRouter(similarity=lexical, seed=start + 1)
    episodes = []
    for i in range(start, start + n):
        ctx, cands, relevant = world(i)
        sel = router.choose(ctx, cands)
        episodes.append(
            Episode(
                "u1",
                ctx.query,
                selections=(sel,),
                reward=reward_of(sel, relevant),
                finalized_at=utcnow() if final else None,
            )
        )
    log.log_episodes(episodes)


def test_provisional_rewards_are_left_out_by_default_and_counted(log: EpisodeLog, lexical: Similarity) -> None:
    _log_rounds(log, lexical, 0, 60, final=True)
    _log_rounds(log, lexical, 60, 15, final=False)
    target = HybridRouter(similarity=lexical)
    final_only = evaluate_on_log(log, target, policy="hybrid", estimators=["cdr", "pi"])
    assert (final_only.n_rounds, final_only.n_provisional) == (60, 15)
    assert final_only.as_json()["n_provisional_left_out"] == 15
    assert logged_value(log)[2] == 60
    everything = evaluate_on_log(log, target, policy="hybrid", estimators=["cdr", "pi"], include_provisional=True)
    assert (everything.n_rounds, everything.n_provisional) == (75, 0)
    assert logged_value(log, include_provisional=True)[2] == 75


def test_a_log_of_provisional_rewards_only_says_how_to_evaluate_them(log: EpisodeLog, lexical: Similarity) -> None:
    _log_rounds(log, lexical, 0, 12, final=False)
    with pytest.raises(InvalidRecordError, match="no rewarded decisions .*12 decisions have a provisional reward only"):
        evaluate_on_log(log, HybridRouter(similarity=lexical), policy="hybrid")
    with pytest.raises(InvalidRecordError, match="holds 0 finally rewarded decisions"):
        train_from_log(log)


def test_train_from_log_learns_and_evaluates_on_final_rewards_only(log: EpisodeLog, lexical: Similarity) -> None:
    _log_rounds(log, lexical, 0, 40, final=True)
    _log_rounds(log, lexical, 40, 30, final=False)
    report = train_from_log(log, holdout=0.25)
    assert report.n_train + report.n_holdout == 40
    assert report.evaluation.n_provisional == sum(
        1 for d in log.iter_decisions(since=report.split_at) if d.reward is not None and not d.final
    )
    included = train_from_log(log, holdout=0.25, include_provisional=True)
    assert included.n_train + included.n_holdout == 70


def test_rewarded_counts_and_times_are_read_without_reading_the_decisions(log: EpisodeLog, lexical: Similarity) -> None:
    _log_rounds(log, lexical, 0, 25, final=True)
    _log_rounds(log, lexical, 25, 15, final=False)
    decisions = list(log.iter_decisions())
    for provisional in (False, True):
        times = [d.selection.created_at for d in decisions if d.reward is not None and (d.final or provisional)]
        assert log.count_rewarded(include_provisional=provisional) == len(times)
        for k in (0, 7, len(times) - 1):
            assert log.rewarded_time_at(k, include_provisional=provisional) == times[k]
        since = times[10]
        assert log.count_rewarded(since=since, include_provisional=provisional) == len(times) - 10
        assert log.rewarded_time_at(0, since=since, include_provisional=provisional) == since
    with pytest.raises(InvalidRecordError, match="no rewarded decision at position 40"):
        log.rewarded_time_at(40, include_provisional=True)


def test_cli_ope_log_reports_and_includes_provisional_decisions(
    migrated_url: str, lexical: Similarity, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        _log_rounds(log, lexical, 0, 40, final=True)
        _log_rounds(log, lexical, 40, 5, final=False)
    out = tmp_path / "ope.json"
    args = ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "cdr,pi", "--no-store"]
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "on 40 logged decisions" in result.output
    assert "left out 5 decisions whose reward is still provisional" in result.output
    assert json.loads(out.read_text())["n_provisional_left_out"] == 5
    included = runner.invoke(app, [*args, "--include-provisional"])
    assert included.exit_code == 0, included.output
    assert "on 45 logged decisions" in included.output and "left out" not in included.output


def test_cli_ope_log_evaluates_the_decisions_a_file_lists(migrated_url: str, lexical: Similarity, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with EpisodeLog(migrated_url) as log:
        _log_rounds(log, lexical, 0, 40, final=True)
        ids = [d.selection.id for d in log.iter_decisions()][:25]
    listed = tmp_path / "segment.txt"
    listed.write_text("# the first 25\n" + "\n".join(ids) + "\n\n")
    args = ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "cdr", "--no-store"]
    result = runner.invoke(app, [*args, "--decisions", str(listed)])
    assert result.exit_code == 0, result.output
    assert "on 25 logged decisions" in result.output and "named no rewarded decision" not in result.output
    partly = tmp_path / "partly.txt"
    partly.write_text("\n".join([*ids[:10], "ep-not-a-decision", "another-unknown"]) + "\n")
    some = runner.invoke(app, [*args, "--decisions", str(partly)])
    assert some.exit_code == 0, some.output
    assert "on 10 logged decisions" in some.output
    assert "2 of the 12 decision ids in --decisions named no rewarded decision" in some.output
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    refused = runner.invoke(app, [*args, "--decisions", str(empty)])
    assert refused.exit_code == 1 and "lists no decision ids" in refused.output
    missing = runner.invoke(app, [*args, "--decisions", str(tmp_path / "nope.txt")])
    assert missing.exit_code == 2 and "nope.txt" in missing.output


def test_since_and_until_must_be_timezone_aware_and_ordered(log: EpisodeLog, lexical: Similarity) -> None:
    log_world(log, RandomRouter(similarity=lexical, seed=1), 20)
    target = [Target("hybrid", HybridRouter(similarity=lexical))]
    naive = datetime(2020, 1, 1)
    with pytest.raises(InvalidRecordError, match=r"since is a naive datetime \(2020-01-01T00:00:00\)"):
        logged_value(log, since=naive)
    with pytest.raises(InvalidRecordError, match="until is a naive datetime"):
        evaluate_policies(log, target, until=naive)
    with pytest.raises(InvalidRecordError, match="since is a naive datetime"):
        train_from_log(log, since=naive)
    aware = datetime(2020, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidRecordError, match="since .* must be before until"):
        evaluate_policies(log, target, since=aware, until=aware)
    assert logged_value(log, since=aware)[2] == 20  # an aware time reads as before


def test_decision_ids_restrict_the_evaluation_and_the_logged_value_to_those_decisions(
    log: EpisodeLog, lexical: Similarity
) -> None:
    _log_rounds(log, lexical, 0, 40, final=True)
    decisions = [d for d in log.iter_decisions() if d.reward is not None]
    kept = [d.selection.id for d in decisions[::2]]
    mean = sum(d.reward.total for d in decisions[::2] if d.reward is not None) / len(kept)
    value, _, n = logged_value(log, decision_ids=kept)
    assert n == 20 and value == pytest.approx(mean)
    named = logged_value(log, decision_ids=kept)  # a named record, not a bare (float, float, int)
    assert (named.value, named.n_rounds) == (value, n) and named.stderr > 0
    assert math.isnan(logged_value(log, decision_ids=["no-such-decision"]).value)
    target = HybridRouter(similarity=lexical)
    segment = evaluate_on_log(log, target, policy="hybrid", estimators=["cdr"], decision_ids=set(kept))
    assert segment.n_rounds == 20
    assert segment.results[0].details["window"]["decision_ids_given"] == 20
    whole = evaluate_on_log(log, target, policy="hybrid", estimators=["cdr"])
    assert "decision_ids_given" not in whole.results[0].details["window"]
    with pytest.raises(InvalidRecordError, match="decision_ids must be a collection of decision ids, got str"):
        logged_value(log, decision_ids=kept[0])
    with pytest.raises(InvalidRecordError, match="decision_ids must hold decision ids"):
        evaluate_on_log(log, target, policy="hybrid", decision_ids=[1, 2])  # type: ignore[list-item]
    with pytest.raises(InvalidRecordError, match="no rewarded decisions"):
        evaluate_on_log(log, target, policy="hybrid", decision_ids=["no-such-decision"])


def test_a_corrupted_row_is_named_by_its_decision_and_episode(migrated_url: str, lexical: Similarity) -> None:
    with EpisodeLog(migrated_url) as log:
        log_world(log, RandomRouter(similarity=lexical, seed=1), 20)
    engine = make_engine(migrated_url)
    try:
        with engine.begin() as conn:
            decision_id, episode_id = conn.execute(
                select(DecisionRow.id, DecisionRow.episode_id).order_by(DecisionRow.created_at).limit(1)
            ).one()
            slot = conn.execute(
                select(DecisionSlotRow.probabilities).where(
                    DecisionSlotRow.decision_id == decision_id, DecisionSlotRow.slot == 0
                )
            ).scalar_one()
            bad = [p * 1.1 for p in slot]  # sums to 1.1
            conn.execute(
                update(DecisionSlotRow)
                .where(DecisionSlotRow.decision_id == decision_id, DecisionSlotRow.slot == 0)
                .values(probabilities=bad)
            )
        with EpisodeLog(migrated_url) as log:
            target = [Target("hybrid", HybridRouter(similarity=lexical))]
            with pytest.raises(InvalidRecordError, match=f"decision {decision_id} of episode {episode_id}: SlotDraw 0"):
                evaluate_policies(log, target)
        with engine.begin() as conn:
            conn.execute(
                update(DecisionSlotRow)
                .where(DecisionSlotRow.decision_id == decision_id, DecisionSlotRow.slot == 0)
                .values(probabilities=slot)
            )
            other = conn.execute(
                select(RewardRow.episode_id).where(RewardRow.episode_id != episode_id).limit(1)
            ).scalar_one()
            conn.execute(update(RewardRow).where(RewardRow.episode_id == other).values(s=5.0))
        with (
            EpisodeLog(migrated_url) as log,
            pytest.raises(InvalidRecordError, match=f"reward of episode {other}: reward component S = 5.0"),
        ):
            logged_value(log)
    finally:
        engine.dispose()


def test_a_one_decision_log_keeps_its_point_estimates_and_says_an_interval_needs_two(
    log: EpisodeLog, lexical: Similarity
) -> None:
    log_world(log, RandomRouter(similarity=lexical, seed=1), 1)
    ev = evaluate_on_log(log, HybridRouter(similarity=lexical), policy="hybrid", estimators=["sips", "pi", "cdr"])
    rec = ev.recommended
    assert ev.n_rounds == 1 and not rec.supported
    assert rec.value == ev.estimates["cdr"].value
    assert all(math.isfinite(e.value) for e in ev.estimates.values())
    assert "an interval needs at least 2 decisions; the log has 1" in rec.reason
    assert "undefined" not in rec.reason
    assert (rec.ci_low, rec.ci_high) == pytest.approx((-1.9, 1.6))  # the bounds: the reward's range
    assert [r.estimator for r in ev.results] == ["cdr"]  # only the recommended row has finite bounds


def test_an_unsupported_target_with_nothing_unreached_does_not_claim_a_widening(
    log: EpisodeLog, lexical: Similarity
) -> None:
    # a greedy logger and the same greedy target: every weight is 1, nothing unreached, but ten
    # decisions are too few effective ones
    log_world(log, HybridRouter(similarity=lexical), 10)
    ev = evaluate_on_log(log, HybridRouter(similarity=lexical), policy="hybrid", estimators=["cdr", "pi"])
    rec = ev.recommended
    assert not rec.supported and "effective sample size 10.0 is below 20" in rec.reason
    assert ev.unreached_share == 0.0
    assert "widened" not in rec.reason and "0%" not in rec.reason


def test_the_seed_seeds_a_stochastic_targets_rollouts(log: EpisodeLog, lexical: Similarity) -> None:
    log_world(log, RandomRouter(similarity=lexical, seed=1), 60)

    def dm(seed: int) -> float:
        ev = evaluate_on_log(log, RandomRouter(similarity=lexical), policy="random", estimators=["dm"], seed=seed)
        return ev.estimates["dm"].value

    assert dm(0) == dm(0)  # reproducible for a seed
    assert len({dm(0), dm(1), dm(7)}) == 3  # and redrawn by another


def test_bad_router_arguments_fail_when_the_policy_is_resolved(log: EpisodeLog) -> None:
    with pytest.raises(ConfigError, match=r"bad arguments for router 'hybrid': min_probability must lie in \[0, 1\)"):
        resolve_policy('hybrid:{"min_probability": 2}', log)
    with pytest.raises(ConfigError, match="bad arguments for router 'vw'"):
        resolve_policy('vw:{"bogus": 1}', log)


def test_a_snapshot_that_no_longer_loads_says_whether_its_learner_args_or_its_model_is_at_fault(
    log: EpisodeLog,
) -> None:
    snapshot = LinearRouter().snapshot()
    log.save_snapshot(replace(snapshot, version="bad-args", learner_args={**snapshot.learner_args, "nope": 1}))
    log.save_snapshot(replace(snapshot, version="bad-value", learner_args={**snapshot.learner_args, "epsilon": 7}))
    log.save_snapshot(replace(snapshot, version="bad-model", model=b"\x00\x01\x02\x03"))
    with pytest.raises(
        ConfigError, match=r"bad-args no longer loads \(learner_args\): .*unexpected keyword argument 'nope'"
    ):
        resolve_policy("snapshot:bad-args", log)
    with pytest.raises(ConfigError, match=r"bad-value no longer loads \(learner_args\): epsilon must lie in \[0, 1\]"):
        resolve_policy("snapshot:bad-value", log)
    with pytest.raises(ConfigError, match=r"bad-model no longer loads \(model\)"):
        resolve_policy("snapshot:bad-model", log)


def test_targets_must_be_targets_with_distinct_names(log: EpisodeLog, lexical: Similarity, migrated_url: str) -> None:
    log_world(log, RandomRouter(similarity=lexical, seed=1), 20)
    hybrid = Target("hybrid", HybridRouter(similarity=lexical))
    # the JSON's policies and the paired differences are keyed by name: the second would replace the first
    with pytest.raises(InvalidRecordError, match="policy 'hybrid' is named twice"):
        evaluate_policies(log, [hybrid, Target("hybrid", RandomRouter(similarity=lexical))], estimators=["cdr"])
    with pytest.raises(InvalidRecordError, match=r"targets must be a sequence of Target\(policy, router\), got Target"):
        evaluate_policies(log, hybrid, estimators=["cdr"])  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError, match=r"targets\[0\] must be a Target"):
        evaluate_policies(log, [HybridRouter(similarity=lexical)], estimators=["cdr"])  # type: ignore[list-item]
    result = runner.invoke(
        app, ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--policy", "hybrid", "--no-store"]
    )
    assert result.exit_code == 1 and "policy 'hybrid' is named twice" in result.output


def test_decision_ids_naming_no_rewarded_decision_say_so(log: EpisodeLog, lexical: Similarity) -> None:
    log_world(log, RandomRouter(similarity=lexical, seed=1), 20)
    episode_ids = [e.id for e in log.list_episodes(limit=3).items]
    target = HybridRouter(similarity=lexical)
    with pytest.raises(InvalidRecordError, match="among the 3 decision ids given .*not episode ids"):
        evaluate_on_log(log, target, policy="hybrid", estimators=["cdr"], decision_ids=episode_ids)
