"""Evaluate a policy from an ``.npz`` of obp-style arrays: the library side of ``memabra ope arrays``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._batch import BanditArrays
from memabra.evals.ope._diagnostics import ImportanceWeightDiagnostics
from memabra.evals.ope._estimators import (
    BanditEstimator,
    DirectMethod,
    DoublyRobust,
    DoublyRobustWithShrinkage,
    InverseProbabilityWeighting,
    SelfNormalizedDoublyRobust,
    SelfNormalizedInverseProbabilityWeighting,
    SwitchDoublyRobust,
)
from memabra.evals.ope._interval import IntervalMethod, PolicyValueInterval, parse_interval_method
from memabra.evals.ope._reward_model import CrossFittedRewardModel
from memabra.evals.ope._validation import OPEInputError

__all__ = [
    "ESTIMATOR_NAMES",
    "ArraysReport",
    "EstimatorSettings",
    "evaluate_bandit_arrays",
    "load_bandit_arrays",
    "make_estimators",
]

ESTIMATOR_NAMES = ("ipw", "snipw", "dm", "dr", "sndr", "switch-dr", "dr-os")

# obp's name for the reward model's predictions is accepted alongside the short one
_OBP_ESTIMATED_REWARDS = "estimated_rewards_by_reg_model"
_ESTIMATED_REWARDS_KEYS = ("estimated_rewards", _OBP_ESTIMATED_REWARDS)
# an .npz is a zip archive; np.save writes its own magic string
_ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"
_ARRAY_KEYS = ("action", "reward", "pscore", "action_dist", "position", "context", "action_context")


@dataclass(frozen=True, slots=True)
class EstimatorSettings:
    """Hyperparameters of the named estimators (obp's defaults).

    ``clip_lambda`` clips the weight in ipw and dr; ``switch_lambda`` is Switch-DR's threshold;
    ``dros_lambda`` is DRos's shrinkage (0 gives DM, inf gives DR).
    """

    clip_lambda: float = math.inf
    switch_lambda: float = math.inf
    dros_lambda: float = 0.0


def make_estimators(names: Sequence[str], settings: EstimatorSettings | None = None) -> tuple[BanditEstimator, ...]:
    """Estimators for obp's short names, in the order given."""
    settings = settings or EstimatorSettings()
    factories: dict[str, Callable[[], BanditEstimator]] = {
        "ipw": lambda: InverseProbabilityWeighting(lambda_=settings.clip_lambda),
        "snipw": SelfNormalizedInverseProbabilityWeighting,
        "dm": DirectMethod,
        "dr": lambda: DoublyRobust(lambda_=settings.clip_lambda),
        "sndr": SelfNormalizedDoublyRobust,
        "switch-dr": lambda: SwitchDoublyRobust(lambda_=settings.switch_lambda),
        "dr-os": lambda: DoublyRobustWithShrinkage(lambda_=settings.dros_lambda),
    }
    if not names:
        raise OPEInputError("estimators", f"name at least one estimator of {', '.join(ESTIMATOR_NAMES)}")
    unknown = [name for name in names if name not in factories]
    if unknown:
        raise OPEInputError("estimators", f"unknown estimator {unknown[0]!r}; choose from {', '.join(ESTIMATOR_NAMES)}")
    if len(set(names)) != len(names):
        raise OPEInputError("estimators", f"each estimator may be named once; got {', '.join(names)}")
    return tuple(factories[name]() for name in names)


def load_bandit_arrays(path: str | PathLike[str]) -> BanditArrays:
    """Read and validate an ``.npz`` holding ``action``, ``reward``, ``pscore``, ``action_dist`` and
    optionally ``position``, ``estimated_rewards`` (or ``estimated_rewards_by_reg_model``),
    ``context`` and ``action_context``."""
    stored = _read_npz(path)
    unknown = sorted(set(stored) - set(_ARRAY_KEYS) - set(_ESTIMATED_REWARDS_KEYS))
    if unknown:
        known = ", ".join(_ARRAY_KEYS + _ESTIMATED_REWARDS_KEYS)
        raise OPEInputError(unknown[0], f"unexpected array {unknown[0]!r} in {path}; known: {known}")
    for required in ("action", "reward", "pscore", "action_dist"):
        if required not in stored:
            raise OPEInputError(required, f"{path} has no {required!r} array")
    given = [key for key in _ESTIMATED_REWARDS_KEYS if key in stored]
    if len(given) > 1:
        raise OPEInputError(given[1], f"{path} holds both {given[0]!r} and {given[1]!r}; keep one")
    try:
        return BanditArrays(
            action_dist=stored["action_dist"],
            action=stored["action"],
            reward=stored["reward"],
            pscore=stored["pscore"],
            position=stored.get("position"),
            estimated_rewards_by_reg_model=stored[given[0]] if given else None,
            context=stored.get("context"),
            action_context=stored.get("action_context"),
        )
    except OPEInputError as exc:
        # BanditArrays speaks obp's argument name; the file's reader named the array in the file
        if exc.field != _OBP_ESTIMATED_REWARDS or not given or given[0] == _OBP_ESTIMATED_REWARDS:
            raise
        raise OPEInputError(given[0], str(exc).replace(_OBP_ESTIMATED_REWARDS, given[0])) from None


def _read_npz(path: str | PathLike[str]) -> dict[str, NDArray[Any]]:
    """The arrays of an ``.npz`` archive by name. np.load reads a plain ``.npy`` as one array and
    reads any other file as a pickle, whose refusal would blame pickling: both are named for what
    they are instead."""
    with open(path, "rb") as handle:
        magic = handle.read(len(_NPY_MAGIC))
    if not magic.startswith(_ZIP_MAGIC):
        kind = "a single .npy array" if magic.startswith(_NPY_MAGIC) else "not a zip archive"
        raise OPEInputError(
            "file", f"{path} is not an .npz archive ({kind}); save the arrays with np.savez(path, action=..., ...)"
        )
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


@dataclass(frozen=True, slots=True)
class ArraysReport:
    """Estimates of one evaluation policy on one log, plus how they were made."""

    n_rounds: int
    n_actions: int
    len_list: int
    reward_model: str
    alpha: float
    ci_method: IntervalMethod
    n_bootstrap_samples: int | None
    estimates: Mapping[str, PolicyValueInterval]
    diagnostics: ImportanceWeightDiagnostics | None

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON document ``memabra ope arrays --json`` writes; other tools read these names."""
        return {
            "n_rounds": self.n_rounds,
            "n_actions": self.n_actions,
            "len_list": self.len_list,
            "alpha": self.alpha,
            "ci_method": str(self.ci_method),
            "n_bootstrap_samples": self.n_bootstrap_samples,
            "reward_model": self.reward_model,
            "estimates": {
                name: {"value": interval.value, "ci_low": interval.ci_low, "ci_high": interval.ci_high}
                for name, interval in self.estimates.items()
            },
            "diagnostics": None
            if self.diagnostics is None
            else {
                "effective_sample_size": self.diagnostics.effective_sample_size,
                "max_weight": self.diagnostics.max_weight,
                "mean_weight": self.diagnostics.mean_weight,
                "zero_weight_share": self.diagnostics.zero_weight_share,
            },
        }


def evaluate_bandit_arrays(
    arrays: BanditArrays,
    estimators: Sequence[BanditEstimator],
    *,
    alpha: float = 0.05,
    method: IntervalMethod | str = IntervalMethod.BOOTSTRAP,
    n_bootstrap_samples: int = 1000,
    random_state: int = 0,
    reward_model: CrossFittedRewardModel | None = None,
) -> ArraysReport:
    """Every estimator with its interval, reducing the arrays to per-round terms once.

    The reward model runs only when an estimator needs q_hat and the arrays carry no
    ``estimated_rewards_by_reg_model``; given predictions are used as they are.
    """
    if not estimators:
        raise OPEInputError("estimators", "name at least one estimator")
    method = parse_interval_method(method)
    needs_model = any(estimator.needs_reward_model for estimator in estimators)
    source = "not needed"
    if arrays.estimated_rewards_by_reg_model is not None:
        source = "given"
    elif needs_model:
        model = reward_model or CrossFittedRewardModel(random_state=random_state)
        arrays = arrays.with_estimated_rewards(model.fit_predict(arrays))
        source = _describe(model, arrays)
    batch = arrays.round_batch()
    estimates = {
        estimator.estimator_name: estimator.interval_from_batch(
            batch, alpha=alpha, n_bootstrap_samples=n_bootstrap_samples, random_state=random_state, method=method
        )
        for estimator in estimators
    }
    weights = batch.importance_weight()
    return ArraysReport(
        n_rounds=arrays.n_rounds,
        n_actions=arrays.n_actions,
        len_list=arrays.len_list,
        reward_model=source,
        alpha=float(alpha),
        ci_method=method,
        n_bootstrap_samples=n_bootstrap_samples if method is IntervalMethod.BOOTSTRAP else None,
        estimates=estimates,
        diagnostics=None if weights is None else ImportanceWeightDiagnostics.from_weights(weights),
    )


def _describe(model: CrossFittedRewardModel, arrays: BanditArrays) -> str:
    if arrays.context is None:
        learner = "per-(action, position) mean reward; no context in the file"
    elif model.base_model is None:
        learner = "linear model on context x action"
    else:
        learner = f"{type(model.base_model).__name__} on context"
    return f"cross-fitted ({model.n_folds} folds): {learner}"
