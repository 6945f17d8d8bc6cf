"""Bad input raises OPEInputError (an InvalidRecordError, a ValueError) naming the field."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memabra._errors import InvalidRecordError
from memabra.evals import ope


def _arrays(n: int = 20, n_actions: int = 3, len_list: int = 1) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    dist = rng.dirichlet(np.ones(n_actions), size=(n, len_list)).transpose(0, 2, 1)
    arrays: dict[str, Any] = {
        "action": rng.integers(0, n_actions, size=n),
        "reward": rng.random(n),
        "pscore": np.full(n, 1.0 / n_actions),
        "action_dist": np.ascontiguousarray(dist),
        "estimated_rewards_by_reg_model": rng.random((n, n_actions, len_list)),
    }
    if len_list > 1:
        arrays["position"] = rng.integers(0, len_list, size=n)
    return arrays


def _raises(field: str, match: str, **overrides: Any) -> OPEInputErrorInfo:
    arrays = {**_arrays(), **overrides}
    with pytest.raises(ope.OPEInputError, match=match) as caught:
        ope.DoublyRobust().estimate_policy_value(**arrays)
    assert caught.value.field == field
    return caught


OPEInputErrorInfo = pytest.ExceptionInfo[ope.OPEInputError]


def test_the_error_is_a_memabra_invalid_record_error_and_a_value_error() -> None:
    assert issubclass(ope.OPEInputError, InvalidRecordError)
    assert issubclass(ope.OPEInputError, ValueError)


def test_pscore_zero_names_the_field_and_the_rounds() -> None:
    pscore = np.full(20, 0.5)
    pscore[[3, 17]] = 0.0
    caught = _raises("pscore", r"pscore must be in \(0, 1\]", pscore=pscore)
    assert str(caught.value) == "pscore must be in (0, 1]; got 0.0 at rounds [3, 17]"


def test_pscore_above_one_and_negative_are_rejected() -> None:
    _raises("pscore", r"got 1\.5 at rounds \[2\]", pscore=np.where(np.arange(20) == 2, 1.5, 0.5))
    _raises("pscore", r"got -0\.1", pscore=np.where(np.arange(20) == 0, -0.1, 0.5))


def test_action_dist_rows_must_sum_to_one() -> None:
    dist = _arrays()["action_dist"].copy()
    dist[4, :, 0] *= 0.9
    _raises("action_dist", r"action_dist must sum to 1 over actions .* at rounds \[4\]", action_dist=dist)


def test_action_dist_entries_must_be_probabilities() -> None:
    dist = np.zeros((20, 3, 1))
    dist[:, 0, 0], dist[:, 1, 0] = 1.5, -0.5
    _raises("action_dist", r"action_dist must be in \[0, 1\]", action_dist=dist)


@pytest.mark.parametrize(
    ("field", "override", "match"),
    [
        ("reward", {"reward": np.zeros(19)}, "reward has 19 rounds but action_dist has 20"),
        ("action", {"action": np.zeros(21, dtype=int)}, "action has 21 rounds but action_dist has 20"),
        ("pscore", {"pscore": np.full((20, 1), 0.5)}, r"pscore must be a 1-D array; got shape \(20, 1\)"),
        ("action_dist", {"action_dist": np.full((20, 3), 1 / 3)}, "action_dist must be a 3-D array"),
        (
            "estimated_rewards_by_reg_model",
            {"estimated_rewards_by_reg_model": np.zeros((20, 4, 1))},
            r"must have action_dist's shape \(20, 3, 1\)",
        ),
    ],
)
def test_shapes_that_disagree_name_the_field(field: str, override: dict[str, Any], match: str) -> None:
    _raises(field, match, **override)


def test_nan_rewards_are_rejected() -> None:
    reward = np.ones(20)
    reward[[5, 6]] = np.nan
    _raises("reward", r"reward must be finite; got nan at rounds \[5, 6\]", reward=reward)


def test_nan_in_the_reward_model_is_rejected() -> None:
    q_hat = np.zeros((20, 3, 1))
    q_hat[7, 1, 0] = np.inf
    _raises(
        "estimated_rewards_by_reg_model",
        r"must be finite; got inf at rounds \[7\]",
        estimated_rewards_by_reg_model=q_hat,
    )


def test_the_reward_model_is_checked_even_by_estimators_that_do_not_read_it() -> None:
    q_hat = np.zeros((20, 3, 1))
    q_hat[2, 0, 0] = np.nan
    with pytest.raises(ope.OPEInputError, match=r"must be finite; got nan at rounds \[2\]") as caught:
        ope.InverseProbabilityWeighting().estimate_policy_value(
            **{**_arrays(), "estimated_rewards_by_reg_model": q_hat}
        )
    assert caught.value.field == "estimated_rewards_by_reg_model"


def test_huge_but_finite_values_are_not_mistaken_for_infinite_ones() -> None:
    # the finiteness check sums the array once; a sum that overflows must not reject finite entries
    q_hat = np.full((20, 3, 1), 1e308)
    arrays = ope.BanditArrays(**{**_arrays(), "estimated_rewards_by_reg_model": q_hat})
    assert arrays.estimated_rewards_by_reg_model is not None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_action_dist_names_the_rounds(bad: float) -> None:
    dist = _arrays()["action_dist"].copy()
    dist[[6, 11], 1, 0] = bad
    _raises("action_dist", rf"action_dist must be finite; got {bad!r} at rounds \[6, 11\]", action_dist=dist)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_pscore_is_rejected(bad: float) -> None:
    _raises(
        "pscore", rf"pscore must be finite; got {bad!r} at rounds \[9\]", pscore=np.where(np.arange(20) == 9, bad, 0.5)
    )


def test_an_empty_log_is_rejected() -> None:
    with pytest.raises(ope.OPEInputError, match="the log is empty") as caught:
        ope.InverseProbabilityWeighting().estimate_policy_value(
            action=np.zeros(0, dtype=int), reward=np.zeros(0), pscore=np.zeros(0), action_dist=np.zeros((0, 3, 1))
        )
    assert caught.value.field == "action"


def test_an_empty_stream_is_rejected() -> None:
    stream = ope.StreamingEstimate(ope.InverseProbabilityWeighting())
    with pytest.raises(ope.OPEInputError, match="the log is empty"):
        stream.estimate_policy_value()


def test_actions_must_be_integers_in_range() -> None:
    _raises("action", r"action must be in \[0, 3\) .* got 3 at rounds \[0\]", action=np.r_[3, np.zeros(19, dtype=int)])
    _raises("action", "action must hold integers; got dtype float64", action=np.zeros(20))


def test_position_is_required_and_checked_when_len_list_exceeds_one() -> None:
    arrays = _arrays(len_list=2)
    without = {key: value for key, value in arrays.items() if key != "position"}
    with pytest.raises(ope.OPEInputError, match="position is required") as caught:
        ope.DoublyRobust().estimate_policy_value(**without)
    assert caught.value.field == "position"
    with pytest.raises(ope.OPEInputError, match=r"position must be in \[0, 2\)"):
        ope.DoublyRobust().estimate_policy_value(**{**arrays, "position": np.full(20, 2)})


def test_a_missing_array_is_named_after_the_estimator_that_needs_it() -> None:
    arrays = _arrays()
    del arrays["estimated_rewards_by_reg_model"]
    with pytest.raises(ope.OPEInputError, match="dr needs estimated_rewards_by_reg_model, which was not given") as dr:
        ope.DoublyRobust().estimate_policy_value(**arrays)
    assert dr.value.field == "estimated_rewards_by_reg_model"
    with pytest.raises(ope.OPEInputError, match="pscore is missing"):
        ope.InverseProbabilityWeighting().estimate_policy_value(
            action=arrays["action"], reward=arrays["reward"], action_dist=arrays["action_dist"]
        )


def test_a_missing_array_is_named_as_the_method_takes_it_not_by_an_internal_term() -> None:
    # the arrays' methods take action, reward, pscore and estimated_rewards_by_reg_model; the
    # batch's internal terms (estimated_reward_policy, evaluation_policy_pscore, ...) are not theirs
    arrays = _arrays()
    with pytest.raises(ope.OPEInputError, match="dm needs estimated_rewards_by_reg_model, which was not given") as dm:
        ope.DirectMethod().estimate_policy_value(action_dist=arrays["action_dist"])
    assert dm.value.field == "estimated_rewards_by_reg_model"
    with pytest.raises(ope.OPEInputError, match="ipw needs action, reward and pscore, which were not given") as ipw:
        ope.InverseProbabilityWeighting().estimate_policy_value(action_dist=arrays["action_dist"])
    assert ipw.value.field == "action"
    with pytest.raises(ope.OPEInputError, match="dr needs action, reward and pscore"):
        ope.DoublyRobust().estimate_interval(
            action_dist=arrays["action_dist"],
            estimated_rewards_by_reg_model=arrays["estimated_rewards_by_reg_model"],
            method="normal",
        )
    # a RoundBatch built by hand is named by its own fields, which are what its caller passed
    with pytest.raises(ope.OPEInputError, match="dm needs estimated_reward_policy") as batch:
        ope.DirectMethod().policy_value_from_batch(ope.RoundBatch(reward=np.ones(3)))
    assert batch.value.field == "estimated_reward_policy"


def test_an_empty_round_batch_says_the_log_is_empty_without_numpy_warnings() -> None:
    empty = ope.RoundBatch(reward=np.zeros(0), pscore=np.zeros(0), evaluation_policy_pscore=np.zeros(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Mean of empty slice" on the way to the error
        for call in (
            ope.InverseProbabilityWeighting().policy_value_from_batch,
            ope.SelfNormalizedInverseProbabilityWeighting().round_rewards_from_batch,
        ):
            with pytest.raises(ope.OPEInputError, match="the log is empty: .* 0 rounds") as caught:
                call(empty)
            assert "importance weight" not in str(caught.value)
        with pytest.raises(ope.OPEInputError, match="the log is empty"):
            ope.InverseProbabilityWeighting().interval_from_batch(
                empty, alpha=0.05, n_bootstrap_samples=10, random_state=0, method="normal"
            )


def test_obp_keyword_arguments_are_accepted_where_they_mean_something_supported() -> None:
    arrays = _arrays()
    plain = ope.DoublyRobust().estimate_policy_value(**arrays)
    # obp 0.5.7 hands these to every estimator; None (obp's default) means "not used"
    for name in ("estimated_pscore", "estimated_importance_weights", "action_embed", "pi_b", "p_e_a"):
        assert ope.DoublyRobust().estimate_policy_value(**arrays, **{name: None}) == plain
        assert ope.InverseProbabilityWeighting().estimate_round_rewards(**arrays, **{name: None}).shape == (20,)
    context = np.random.default_rng(1).random((20, 2))
    assert ope.DoublyRobust().estimate_policy_value(**arrays, context=context, action_context=np.eye(3)) == plain
    interval = ope.InverseProbabilityWeighting().estimate_interval(
        **arrays, estimated_pscore=None, method="normal", alpha=0.1
    )
    assert interval.value == ope.InverseProbabilityWeighting().estimate_policy_value(**arrays)
    with pytest.raises(ope.OPEInputError, match="context must be a 2-D array") as bad_context:
        ope.DoublyRobust().estimate_policy_value(**arrays, context=np.zeros(20))
    assert bad_context.value.field == "context"


def test_obp_keyword_arguments_memabra_cannot_honour_are_refused_by_name() -> None:
    arrays = _arrays()
    with pytest.raises(ope.OPEInputError, match="ipw does not read estimated_pscore .*pass the propensities") as caught:
        ope.InverseProbabilityWeighting().estimate_policy_value(**arrays, estimated_pscore=np.full(20, 0.3))
    assert caught.value.field == "estimated_pscore"
    with pytest.raises(ope.OPEInputError, match="unknown argument 'pscores'") as typo:
        ope.InverseProbabilityWeighting().estimate_policy_value(**arrays, pscores=arrays["pscore"])
    assert typo.value.field == "pscores" and not isinstance(typo.value, TypeError)
    slates = ope.SyntheticSlateBandit().sample(10, random_state=0)
    slate_arrays = {name: getattr(slates, name) for name in ope.SlateBatch.__dataclass_fields__}
    value = ope.SlateStandardIPS().estimate_policy_value(**slate_arrays)
    assert ope.SlateStandardIPS().estimate_policy_value(**slate_arrays, q_hat=None) == value
    with pytest.raises(ope.OPEInputError, match="unknown argument 'slate'") as slate_typo:
        ope.SlateStandardIPS().estimate_policy_value(**slate_arrays, slate=slate_arrays["slate_id"])
    assert slate_typo.value.field == "slate"
    without_id = {k: v for k, v in slate_arrays.items() if k != "slate_id"}
    with pytest.raises(ope.OPEInputError, match="sips needs slate_id, which was not given") as missing:
        ope.SlateStandardIPS().estimate_interval(**without_id, method="normal")
    assert missing.value.field == "slate_id"


@pytest.mark.parametrize("bad", [-1.0, math.nan, "2"])
def test_lambda_must_be_a_non_negative_number(bad: Any) -> None:
    for estimator in (
        ope.InverseProbabilityWeighting,
        ope.DoublyRobust,
        ope.SwitchDoublyRobust,
        ope.DoublyRobustWithShrinkage,
    ):
        with pytest.raises(ope.OPEInputError, match="lambda_ must be a number >= 0") as caught:
            estimator(lambda_=bad)
        assert caught.value.field == "lambda_"


def test_self_normalised_estimators_refuse_a_log_with_only_zero_weights() -> None:
    arrays = _arrays()
    dist = np.zeros((20, 3, 1))
    dist[np.arange(20), (arrays["action"] + 1) % 3, 0] = 1.0
    for estimator in (ope.SelfNormalizedInverseProbabilityWeighting(), ope.SelfNormalizedDoublyRobust()):
        with pytest.raises(ope.OPEInputError, match="every importance weight is 0"):
            estimator.estimate_policy_value(**{**arrays, "action_dist": dist})


def test_interval_arguments_are_checked() -> None:
    arrays = _arrays()
    with pytest.raises(ope.OPEInputError, match="alpha must be in"):
        ope.DoublyRobust().estimate_interval(**arrays, alpha=1.5)
    with pytest.raises(ope.OPEInputError, match="n_bootstrap_samples must be"):
        ope.DoublyRobust().estimate_interval(**arrays, n_bootstrap_samples=0)
    with pytest.raises(ope.OPEInputError, match="method must be 'bootstrap' or 'normal'"):
        ope.DoublyRobust().estimate_interval(**arrays, method="jackknife")


def test_round_batches_check_their_fields() -> None:
    with pytest.raises(ope.OPEInputError, match="pscore has 2 rounds but reward has 3"):
        ope.RoundBatch(reward=np.zeros(3), pscore=np.ones(2))
    with pytest.raises(ope.OPEInputError, match=r"evaluation_policy_pscore must be in \[0, 1\]"):
        ope.RoundBatch(reward=np.zeros(2), pscore=np.ones(2), evaluation_policy_pscore=np.array([0.5, 1.2]))
    with pytest.raises(ope.OPEInputError, match="all fields are None"):
        ope.RoundBatch()


def test_slate_inputs_are_checked() -> None:
    batch = ope.SyntheticSlateBandit().sample(10, random_state=0)
    arrays = {name: getattr(batch, name) for name in ope.SlateBatch.__dataclass_fields__}
    position = arrays["position"].copy()
    position[1] = 0
    with pytest.raises(ope.OPEInputError, match="position must not repeat within a slate; slate_id 0"):
        ope.SlateIndependentIPS().estimate_policy_value(**{**arrays, "position": position})
    pscore = arrays["pscore"].copy()
    pscore[0] /= 2
    with pytest.raises(ope.OPEInputError, match="pscore must be the same at every slot"):
        ope.SlateStandardIPS().estimate_policy_value(**{**arrays, "pscore": pscore})
    cascade = arrays["pscore_cascade"].copy()
    cascade[2] = 1.0
    with pytest.raises(ope.OPEInputError, match=r"pscore_cascade must not increase down a slate .*; slate_id 0 does"):
        ope.SlateRewardInteractionIPS().estimate_policy_value(**{**arrays, "pscore_cascade": cascade})
    with pytest.raises(ope.OPEInputError, match="iips needs pscore_item_position"):
        ope.SlateIndependentIPS().estimate_policy_value(
            slate_id=arrays["slate_id"], reward=arrays["reward"], position=arrays["position"]
        )
    with pytest.raises(ope.OPEInputError, match=r"pscore_cascade must be in \(0, 1\]"):
        ope.SlateRewardInteractionIPS().estimate_policy_value(
            **{**arrays, "pscore_cascade": arrays["pscore_cascade"] * 0}
        )
    with pytest.raises(ope.OPEInputError, match="the log is empty"):
        ope.SlateStandardIPS().estimate_policy_value(
            slate_id=np.zeros(0, dtype=int), reward=np.zeros(0), position=np.zeros(0, dtype=int)
        )


def test_npz_loading_names_missing_and_unknown_arrays(tmp_path: Path) -> None:
    arrays = _arrays()
    base = {key: arrays[key] for key in ("action", "reward", "pscore", "action_dist")}
    path = tmp_path / "log.npz"
    np.savez(path, **{key: value for key, value in base.items() if key != "pscore"})
    with pytest.raises(ope.OPEInputError, match="has no 'pscore' array"):
        ope.load_bandit_arrays(path)
    np.savez(path, **base, rewards=arrays["reward"])
    with pytest.raises(ope.OPEInputError, match="unexpected array 'rewards'"):
        ope.load_bandit_arrays(path)
    q_hat = arrays["estimated_rewards_by_reg_model"]
    np.savez(path, **base, estimated_rewards=q_hat, estimated_rewards_by_reg_model=q_hat)
    with pytest.raises(ope.OPEInputError, match="holds both"):
        ope.load_bandit_arrays(path)
    np.savez(path, **base, estimated_rewards=q_hat)
    assert ope.load_bandit_arrays(path).estimated_rewards_by_reg_model is not None


def test_unknown_or_repeated_estimator_names_are_rejected() -> None:
    with pytest.raises(ope.OPEInputError, match="unknown estimator 'ips'"):
        ope.make_estimators(["ips"])
    with pytest.raises(ope.OPEInputError, match="each estimator may be named once"):
        ope.make_estimators(["dr", "dr"])
