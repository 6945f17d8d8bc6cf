from __future__ import annotations

import math
from datetime import timedelta

import pytest

from factories import candidates, episode, uniform_selection
from memabra import (
    ConfigError,
    Episode,
    Feedback,
    FeedbackError,
    InvalidRecordError,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    Step,
    StepKind,
)
from memabra._config import load_reward_config, parse_weights
from memabra._reward import CompositeReward, RewardConfig, validate_payload

W = RewardWeights()


def test_spec_default_weights() -> None:
    assert W.as_dict() == {"ws": 1.0, "wr": 0.35, "we": 0.30, "wc": 0.40, "wl": 0.15, "wx": 0.20, "wu": 0.25}


@pytest.mark.parametrize(
    ("components", "expected"),
    [
        # complete task, memory hit, modest context, one reuse: 1 + .35 - .2*.1 + .25*.5
        (RewardComponents(s=1.0, hm=1.0, x=0.1, u=0.5), 1.455),
        # wrong answer, missed key memory, a tool error, a correction, slow, wasteful
        (RewardComponents(s=0.0, hm=-1.0, e=0.2, c=1.0, l=0.5, x=0.3), -0.945),
        # misleading answer: -0.5; H averages the kinds present: (1 + 0) / 2 = 0.5 -> .175
        (RewardComponents(s=-0.5, hm=1.0, ht=0.0), -0.325),
        # the bounds
        (RewardComponents(s=-0.5, hm=-1, hs=-1, ht=-1, e=1, c=1, l=1, x=1, u=0), -1.9),
        (RewardComponents(s=1.0, hm=1, hs=1, ht=1, u=1), 1.6),
    ],
)
def test_total_matches_hand_computed_cases(components: RewardComponents, expected: float) -> None:
    assert components.total(W) == pytest.approx(expected, abs=1e-12)


def test_recompute_with_new_weights_uses_stored_components() -> None:
    r = RewardBreakdown(RewardComponents(s=1.0, hm=1.0, c=1.0), W)
    assert r.total == pytest.approx(1 + 0.35 - 0.4)
    heavier = r.reweighted(RewardWeights(wc=1.0))
    assert heavier.total == pytest.approx(1 + 0.35 - 1.0)
    assert heavier.components == r.components


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"s": 2.0}, "S = 2.0 is outside"),
        ({"s": math.nan}, "S must be a finite"),
        ({"hm": -1.5}, "HM = -1.5 is outside"),
        ({"e": math.inf}, "E must be a finite"),
        ({"x": -0.1}, "X = -0.1 is outside"),
    ],
)
def test_component_values_out_of_range_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        RewardComponents(**kwargs)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, "1"])
def test_bad_weights_are_refused(bad: object) -> None:
    with pytest.raises(InvalidRecordError, match="weight wc"):
        RewardWeights(wc=bad)  # type: ignore[arg-type]


def _with(ep: Episode, **changes: object) -> Episode:
    return Episode(**{**{f: getattr(ep, f) for f in ep.__dataclass_fields__}, **changes})


def test_components_are_derived_from_signals() -> None:
    steps = (
        Step(StepKind.TOOL, "search", arguments={"q": "x"}, status="error", error="boom"),
        Step(StepKind.TOOL, "search", arguments={"q": "x"}, status="error", error="boom again"),
        Step(StepKind.MODEL, "m"),
    )
    ep = _with(episode(chosen=("m0", "m2"), steps=steps), used_ids=frozenset({"m0"}))
    fb = [Feedback(ep.id, "explicit", "user", {"correct": False, "correction": "my name is Ann", "useful_ids": ["m0"]})]
    r = CompositeReward().score(ep, fb)
    c = r.components
    assert c.s == 0.0
    assert c.e == pytest.approx(0.2 + 0.75)  # a failed call, then the same failed call again
    assert c.c == 1.0
    assert c.hm == 1.0  # one chosen memory helped, none known missing
    assert c.hs is None and c.ht is None  # nothing of those kinds was offered
    # m0 used at 0.25 weight, m2 unused in full: (2.5 + 10) / 2000
    assert c.x == pytest.approx((0.25 * 10 + 10) / 2000)
    assert c.u == 0.5
    assert r.total == pytest.approx(c.total(W))


@pytest.mark.parametrize(
    ("first", "again", "e"),
    [
        ("timeout", "error", 1.0),  # retried unchanged after it timed out: 0.5 + 0.75, clipped (was 0.7)
        ("error", "timeout", 0.2 + 0.75),  # was 0.7
        ("timeout", "timeout", 1.0),  # 0.5 + 0.75, clipped (was 1.0 only by clipping 0.5 + 0.5)
    ],
)
def test_a_timed_out_call_tried_again_unchanged_is_a_repeated_failure(first: str, again: str, e: float) -> None:
    steps = (
        Step(StepKind.TOOL, "book", arguments={"city": "Lyon"}, status=first, error="no answer"),
        Step(StepKind.TOOL, "book", arguments={"city": "Lyon"}, status=again, error="no answer"),
        Step(StepKind.TOOL, "book", arguments={"city": "Oslo"}, status="ok"),
    )
    assert CompositeReward().score(episode(steps=steps), []).components.e == pytest.approx(e)


def test_missed_relevant_candidates_make_h_negative() -> None:
    ep = episode(chosen=("m0",))
    fb = [Feedback(ep.id, "explicit", "user", {"relevant_ids": ["m3", "m4"]})]
    assert CompositeReward().score(ep, fb).components.hm == pytest.approx((0 - 2) / 2)


def test_default_success_when_nobody_says_anything_and_repeat_caps_it() -> None:
    ep = episode()
    assert CompositeReward().score(ep).components.s == 0.5
    rep = [Feedback(ep.id, "implicit", "detector", {"repeat": True})]
    r = CompositeReward().score(ep, rep)
    assert r.components.s == 0.0 and r.components.c == 0.5


def test_latency_and_steps_penalty() -> None:
    slow = _with(episode(), metadata={"latency_ms": 5_000 + 30_000})
    assert CompositeReward().score(slow).components.l == pytest.approx(0.5)
    many = _with(episode(steps=tuple(Step(StepKind.MODEL, "m") for _ in range(12))), metadata={"latency_ms": 0.0})
    assert CompositeReward().score(many).components.l == pytest.approx(0.5 * 8 / 8)


def test_rating_and_programmatic_acceptance() -> None:
    ep = episode()
    assert CompositeReward().score(ep, [Feedback(ep.id, "explicit", "u", {"rating": 4})]).components.s == 0.75
    assert (
        CompositeReward().score(ep, [Feedback(ep.id, "programmatic", "tests", {"accepted": True})]).components.s == 1.0
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"sucess": 1.0}, "unknown feedback key 'sucess'"),
        ({"success": 3}, "'success' must be"),
        ({"rating": 9}, "'rating' must be"),
        ({"used_ids": "m1"}, "'used_ids' must be a list"),
        ({"correct": "yes"}, "'correct' must be true or false"),
    ],
)
def test_bad_feedback_payloads_are_refused(payload: dict[str, object], message: str) -> None:
    with pytest.raises(FeedbackError, match=message):
        validate_payload(payload)


def test_nan_in_feedback_is_refused() -> None:
    with pytest.raises(InvalidRecordError, match="must be a finite number"):
        Feedback("e1", "explicit", "u", {"success": math.nan})


def test_empty_candidate_set_is_refused() -> None:
    from memabra import RoutingContext, Selection

    with pytest.raises(InvalidRecordError, match="offered is empty"):
        Selection(RoutingContext("q", "u"), (), (), policy="p", policy_version="1", seed=0)


def test_weights_from_toml_environment_and_constructor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    toml = tmp_path / "memabra.toml"
    toml.write_text("[reward]\nfeedback_window_seconds = 60\n\n[reward.weights]\nwc = 0.9\nwx = 0.1\n")
    cfg = load_reward_config(toml, environ={})
    assert cfg.weights.wc == 0.9 and cfg.weights.wx == 0.1 and cfg.weights.ws == 1.0
    assert cfg.feedback_window == timedelta(seconds=60)
    env = {"MEMABRA_REWARD_WEIGHTS": "wc=0.5", "MEMABRA_FEEDBACK_WINDOW_SECONDS": "5"}
    cfg = load_reward_config(toml, environ=env)
    assert cfg.weights.wc == 0.5 and cfg.weights.wx == 0.1 and cfg.feedback_window == timedelta(seconds=5)
    cfg = load_reward_config(toml, environ=env, weights=RewardWeights(wc=0.01))
    assert cfg.weights.wc == 0.01
    # a file the variable names must be there: a mistyped mount path is not "no configuration"
    with pytest.raises(ConfigError, match=r"\$MEMABRA_CONFIG names .*absent.toml, which does not exist"):
        load_reward_config(environ={"MEMABRA_CONFIG": str(tmp_path / "absent.toml")})


def test_bad_configuration_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="weight wc is not a number"):
        parse_weights("wc=lots")
    with pytest.raises(ConfigError, match="must be finite"):
        parse_weights("wc=nan")
    with pytest.raises(ConfigError, match="NAME one of"):
        parse_weights("wq=1")
    bad = tmp_path / "bad.toml"
    bad.write_text("[reward.weights]\nwc = -1\n")
    with pytest.raises(ConfigError, match="non-negative"):
        load_reward_config(bad, environ={})
    with pytest.raises(ConfigError, match="not found"):
        load_reward_config(tmp_path / "missing.toml", environ={})


def test_multi_kind_hit_split() -> None:
    from memabra import CandidateKind

    mem = candidates("m", 3)
    tools = candidates("t", 2, CandidateKind.TOOL)
    sel_m = uniform_selection("u1", mem, ["m0"])
    sel_t = uniform_selection("u1", tools, ["t1"])
    ep = Episode(user_id="u1", query="q", selections=(sel_m, sel_t))
    fb = [Feedback(ep.id, "explicit", "u", {"used_ids": ["m0"], "relevant_ids": ["t0"]})]
    c = CompositeReward().score(ep, fb).components
    assert (c.hm, c.hs, c.ht) == (1.0, None, -1.0)
    assert c.h == 0.0


@pytest.mark.parametrize(
    ("where", "raw", "message"),
    [
        ("toml", '"soon"', "feedback_window_seconds must be a finite non-negative number of seconds"),
        ("toml", "true", "feedback_window_seconds must be a finite non-negative number of seconds"),
        ("toml", "nan", "feedback_window_seconds must be a finite non-negative number of seconds"),
        ("toml", "inf", "feedback_window_seconds must be a finite non-negative number of seconds"),
        ("toml", "1e30", "feedback_window_seconds is too large"),
        ("env", "inf", "MEMABRA_FEEDBACK_WINDOW_SECONDS must be a finite non-negative number of seconds"),
        ("env", "1e30", "MEMABRA_FEEDBACK_WINDOW_SECONDS is too large"),
    ],
)
def test_a_bad_feedback_window_is_a_config_error(tmp_path, where: str, raw: str, message: str) -> None:  # type: ignore[no-untyped-def]
    toml = tmp_path / "memabra.toml"
    if where == "toml":
        toml.write_text(f"[reward]\nfeedback_window_seconds = {raw}\n")
        env: dict[str, str] = {}
    else:
        toml.write_text("")
        env = {"MEMABRA_FEEDBACK_WINDOW_SECONDS": raw}
    with pytest.raises(ConfigError, match=message):
        load_reward_config(toml, environ=env)


def test_default_success_takes_the_whole_success_range() -> None:
    # S ranges -0.5 .. 1, so a deployment that reads silence as a mild failure may say so
    assert RewardConfig(default_success=-0.25).default_success == -0.25
    assert CompositeReward(RewardConfig(default_success=-0.25)).score(episode()).components.s == -0.25
    with pytest.raises(FeedbackError, match=r"default_success must be in \[-0.5, 1\]"):
        RewardConfig(default_success=-0.75)


@pytest.mark.parametrize(
    ("field", "value"),
    [("free_steps", -3), ("free_steps", 1.5), ("step_scale", 0), ("step_scale", True), ("version", ""), ("version", 3)],
)
def test_step_thresholds_and_version_are_checked(field: str, value: object) -> None:
    with pytest.raises(FeedbackError, match=f"RewardConfig.{field}"):
        RewardConfig(**{field: value})  # type: ignore[arg-type]


def test_a_memory_label_keeps_the_rewards_decision() -> None:
    from memabra._reward import rescored

    stored = RewardBreakdown(RewardComponents(s=1.0, hm=0.0), W, "v1", decision_id="d1")
    relabelled = rescored(stored, RewardWeights(wc=1.0), memory_label=-1.0)
    assert relabelled.decision_id == "d1" and relabelled.version == "v1"
    assert relabelled.components.hm == -1.0 and relabelled.weights == RewardWeights(wc=1.0)
