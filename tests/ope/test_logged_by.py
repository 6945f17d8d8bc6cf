"""``logged_by`` / ``--logged-by``: offline evaluation and training on the decisions one policy
logged, on a log two bots (each with a router class of its own, so a policy name of its own) share
(docs/production.md, "Several agents on one log"). The support bot earns more than the sales bot,
so a logging-policy value that mixed their traffic would show."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from logged_world import reward_of, world
from memabra import ConfigError, Episode, InvalidRecordError
from memabra._admin._ope_views import ope_rows
from memabra._cli import app
from memabra._records import RewardBreakdown, RewardComponents, RewardWeights, utcnow
from memabra.evals.offline import Target, evaluate_on_log, evaluate_policies, logged_value, train_from_log
from memabra.router import HybridRouter, RandomRouter, Similarity
from memabra.storage import EpisodeLog

pytestmark = pytest.mark.slow

runner = CliRunner(env={"COLUMNS": "240"})

SUPPORT_DECISIONS, SALES_DECISIONS = 60, 40
# how a command line names the support bot's class (tests/ is on the path)
SUPPORT_CLASS = f"ope.{Path(__file__).stem}:SupportRouter"
FAST = ["cdr", "pi"]


class SupportRouter(RandomRouter):
    name = "support"


class SalesRouter(RandomRouter):
    name = "sales"


# the sales bot's every turn: a flat, low reward
SALES_REWARD = RewardBreakdown(RewardComponents(hm=-1.0), RewardWeights())


@pytest.fixture
def lexical() -> Similarity:
    return Similarity(encoder=None)


@pytest.fixture
def shared_log(log: EpisodeLog, lexical: Similarity) -> EpisodeLog:
    """Both bots' turns, interleaved in time, every reward final."""
    support, sales = SupportRouter(similarity=lexical, seed=1), SalesRouter(similarity=lexical, seed=2)
    episodes = []
    for i in range(SUPPORT_DECISIONS + SALES_DECISIONS):
        ctx, cands, relevant = world(i)
        bot = support if i % 5 < 3 else sales  # 60 support turns, 40 sales turns, interleaved
        sel = bot.choose(ctx, cands)
        reward = reward_of(sel, relevant) if bot is support else SALES_REWARD
        episodes.append(Episode("u1", ctx.query, selections=(sel,), reward=reward, finalized_at=utcnow()))
    log.log_episodes(episodes)
    return log


def _mean_reward(log: EpisodeLog, policy: str | None) -> tuple[float, int]:
    totals = [
        d.reward.total
        for d in log.iter_decisions()
        if d.reward is not None and (policy is None or d.selection.policy == policy)
    ]
    return sum(totals) / len(totals), len(totals)


def test_the_logging_policy_value_is_the_mean_reward_of_that_policys_own_decisions(
    shared_log: EpisodeLog, lexical: Similarity
) -> None:
    support_mean, n_support = _mean_reward(shared_log, "support")
    assert n_support == SUPPORT_DECISIONS
    assert not math.isclose(support_mean, _mean_reward(shared_log, None)[0])  # mixing would show

    value, _, n = logged_value(shared_log, logged_by="support")
    assert (value, n) == (pytest.approx(support_mean), SUPPORT_DECISIONS)

    target = HybridRouter(similarity=lexical)
    ev = evaluate_on_log(shared_log, target, policy="hybrid", estimators=FAST, logged_by="support")
    assert ev.n_rounds == SUPPORT_DECISIONS
    assert ev.logging_value == pytest.approx(support_mean)
    assert {r.n_rounds for r in ev.results} == {SUPPORT_DECISIONS}
    # the estimates and the support diagnostics are those of the support bot's decisions named one by one
    ids = [d.selection.id for d in shared_log.iter_decisions() if d.selection.policy == "support"]
    named = evaluate_on_log(shared_log, target, policy="hybrid", estimators=FAST, decision_ids=ids)
    assert ev.estimates == named.estimates and ev.diagnostics == named.diagnostics
    assert ev.recommended == named.recommended and ev.floor_share == named.floor_share
    assert all(r.details["window"]["logged_by"] == ["support"] for r in ev.results)

    # every policy named: the whole log, as without the filter (the filter recorded all the same)
    both = evaluate_on_log(shared_log, target, policy="hybrid", estimators=FAST, logged_by=["support", "sales"])
    whole = evaluate_on_log(shared_log, target, policy="hybrid", estimators=FAST)
    assert both.n_rounds == whole.n_rounds == SUPPORT_DECISIONS + SALES_DECISIONS
    assert both.logging_value == pytest.approx(whole.logging_value)
    assert both.results[0].details["window"]["logged_by"] == ["sales", "support"]
    assert "logged_by" not in whole.results[0].details["window"]


def test_a_policy_that_logged_no_decision_is_refused_naming_those_that_did(shared_log: EpisodeLog) -> None:
    target = [Target("hybrid", HybridRouter(similarity=Similarity(encoder=None)))]
    said = "no decision in the log was logged by policy suport; the policies that logged decisions are: sales, support"
    with pytest.raises(ConfigError, match=said):
        evaluate_policies(shared_log, target, logged_by="suport")
    with pytest.raises(ConfigError, match=said):
        evaluate_policies(shared_log, target, logged_by=["support", "suport"])  # one typo is not ignored
    with pytest.raises(ConfigError, match=said):
        logged_value(shared_log, logged_by="suport")
    with pytest.raises(ConfigError, match=said):
        train_from_log(shared_log, logged_by="suport")
    for wrong, problem in (([], "logged_by is empty"), ([" "], "empty policy"), ([3], "policy names"), (4, "got int")):
        with pytest.raises(InvalidRecordError, match=problem):
            logged_value(shared_log, logged_by=wrong)  # type: ignore[arg-type]


def test_decision_ids_and_logged_by_intersect(shared_log: EpisodeLog, lexical: Similarity) -> None:
    by_policy: dict[str, list[str]] = {"support": [], "sales": []}
    for d in shared_log.iter_decisions():
        by_policy[d.selection.policy].append(d.selection.id)
    some = by_policy["support"][:15] + by_policy["sales"][:10]
    target = HybridRouter(similarity=lexical)
    ev = evaluate_on_log(shared_log, target, policy="hybrid", estimators=FAST, decision_ids=some, logged_by="support")
    assert ev.n_rounds == 15
    assert ev.results[0].details["window"]["decision_ids_given"] == 25
    assert logged_value(shared_log, decision_ids=some, logged_by="sales")[2] == 10
    with pytest.raises(InvalidRecordError, match="no rewarded decisions logged by support .*25 decision ids given"):
        evaluate_on_log(shared_log, target, policy="hybrid", decision_ids=by_policy["sales"][:25], logged_by="support")


def test_train_from_log_splits_trains_and_evaluates_on_that_policys_decisions(shared_log: EpisodeLog) -> None:
    report = train_from_log(shared_log, logged_by="support", holdout=0.25, force=True)
    assert report.n_train + report.n_holdout == SUPPORT_DECISIONS
    assert report.logged_by == frozenset({"support"})
    held_out = [
        d.reward.total
        for d in shared_log.iter_decisions(since=report.split_at)
        if d.selection.policy == "support" and d.reward is not None
    ]
    assert report.n_holdout == len(held_out)
    assert report.logging_value == pytest.approx(sum(held_out) / len(held_out))
    assert report.saved_version is not None
    assert shared_log.get_snapshot(report.saved_version).metrics["logged_by"] == ["support"]
    stored = shared_log.list_ope_runs(report.saved_version)
    assert stored and all(r.details["window"]["logged_by"] == ["support"] for r in stored)
    # the 10-decision floor counts that policy's decisions: the last 15 of the log hold 6 of sales'
    since = sorted(d.selection.created_at for d in shared_log.iter_decisions())[-15]
    with pytest.raises(InvalidRecordError, match="holds 6 finally rewarded decisions logged by sales since"):
        train_from_log(shared_log, logged_by="sales", since=since)
    unfiltered = train_from_log(shared_log, since=since, force=True)
    assert unfiltered.n_train + unfiltered.n_holdout == 15 and unfiltered.logged_by is None
    assert "logged_by" not in unfiltered.evaluation.results[0].details["window"]


def test_the_command_line_names_the_policy_by_class_and_stored_runs_show_the_filter(
    shared_log: EpisodeLog, migrated_url: str, tmp_path: Path
) -> None:
    support_mean, _ = _mean_reward(shared_log, "support")
    out = tmp_path / "ope.json"
    result = runner.invoke(
        app,
        ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--estimators", "cdr,pi"]
        + ["--logged-by", SUPPORT_CLASS, "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert f"on {SUPPORT_DECISIONS} logged decisions (by support only)" in result.output
    doc = json.loads(out.read_text())
    assert doc["n_rounds"] == SUPPORT_DECISIONS and doc["window"]["logged_by"] == ["support"]
    assert doc["logging_value"] == pytest.approx(support_mean)

    runs = runner.invoke(app, ["ope", "runs", "--db", migrated_url, "--json", "-"])
    assert runs.exit_code == 0, runs.output
    assert "logged by support only" in runs.output
    (row,) = [r for r in ope_rows(shared_log.list_ope_runs()) if r.recommended]
    assert row.window is not None and row.window.logged_by == ("support",) and row.window.restricted

    unknown = runner.invoke(app, ["ope", "log", "--db", migrated_url, "--policy", "hybrid", "--logged-by", "linear"])
    assert unknown.exit_code == 1
    assert (
        "no decision in the log was logged by policy linear; the policies that logged decisions are: sales, support"
        in (unknown.output)
    )
    assert "Traceback" not in unknown.output

    trained = runner.invoke(
        app, ["train", "--db", migrated_url, "--logged-by", "sales", "--holdout", "0.25", "--json", "-"]
    )
    assert trained.exit_code == 0, trained.output
    assert f"on {round(SALES_DECISIONS * 0.75)} decisions logged by sales" in trained.output
    said = json.loads(trained.stdout[trained.stdout.index("{") :])
    assert said["logged_by"] == ["sales"] and said["n_train"] + said["n_holdout"] == SALES_DECISIONS
