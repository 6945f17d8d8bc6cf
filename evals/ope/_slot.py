"""Estimators for slot-filled selections, built from each slot's logged distribution.

A memabra decision fills its slots one draw at a time: at draw s (s = 1..L_i, the stop option
included) the logger drew a_s from pi_b(. | x_i, a_1..a_(s-1)) and logged that whole distribution.
Replaying a target policy on the same prefix (teacher forcing) gives pi_e(. | same prefix), so each
draw has a ratio rho_s = pi_e(a_s | prefix) / pi_b(a_s | prefix). Notation (all per decision i):

- R: the decision's reward (composite total); S_s: the set chosen after s draws; q(S): the
  cross-fitted reward model's prediction for a decision that injects S; q_0 = q(empty set).
- W = prod_s rho_s (joint weight); W_(1:s) the product of the first s ratios.
- P = sum_s rho_s - L + 1 (pseudo-inverse weight, Swaminathan et al. 2017).
- r_s: slot rewards that sum to R - q_0: the reward model's increments r_s = q(S_s) - q(S_(s-1))
  for s < L and r_L = R - q(S_(L-1)) (the observed residual lands on the last draw).
- Q_s = E_{a ~ pi_e(. | prefix_s)} [ q(S_(s-1) + a) - q(S_(s-1)) ]: the model's expected gain of
  the target's draw s on the logged prefix.
- q_e = E[ q(S) ] over the target's own selection on x_i (rolled out, not teacher-forced).

Each estimator is the mean (or a ratio of means) of per-decision terms, so every one streams and
gets a delta-method interval (:class:`~memabra.evals.ope.StreamingEstimate`):

========== ========================================= ==============================================
name        V                                          assumption for (near) unbiasedness
========== ========================================= ==============================================
sips        E[W R]                                     support of the whole slate (joint propensity)
snsips      E[W R] / E[W]                              as sips; consistent, bounded by the rewards
iips        E[q_0 + sum_s rho_s r_s]                   slot s's reward term depends only on draw s
rips        E[q_0 + sum_s W_(1:s) r_s]                 none beyond support (cascade: term s depends on
                                                       draws 1..s, true of these r_s by construction)
pi          E[P R]                                     R additive over slots, slots drawn independently
snpi        E[P R] / E[P]                              as pi; self-normalised
dm          E[q_e]                                     the reward model is right
dr          E[q_e + W (R - q(S_L))]                    support, or the model right
idr         E[q_0 + sum_s Q_s + rho_L (R - q(S_L))]    as iips, on the model's residual
cdr         E[q_0 + sum_s W_(1:s-1) Q_s + W (R - q(S_L))]  support, or the model right (cascade DR)
pi-dr       E[q_e + P (R - q(S_L))]                    the model's residual additive over slots
========== ========================================= ==============================================

PI's "slots drawn independently" never holds for memabra's draws (a pick is not offered again; the
stop option ends the kind). P = 1 + sum_s (rho_s - 1) is the first-order expansion of
W = prod_s (1 + (rho_s - 1)), so under support E_b[P R] = V(pi_e) - E_b[(W - P) R]: the left-out
higher-order terms have mean 0 only for independent draws and an additive reward, and PI is biased
otherwise, additive reward or not (cdr minus pi on the same decisions estimates it; docs/ope.md).
pi-dr, iips and idr leave out the same higher-order terms and are judged the same way, iips and idr
also by q_0 + sum_s Q_s minus dm, the model's part of their bias (memabra.evals.offline._bias).

E[W] = E[P] = 1 when the target's support lies within the logger's, which the diagnostics test
(iips and idr, which need each draw covered, are judged on P: E[P] = 1 is that per-draw support).
The per-decision mean of the ratios (``slot_weight``) is descriptive only: whether a decision makes
another draw depends on its own draws, so its expectation is not 1 even under full support.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._base import EstimatorBase
from memabra.evals.ope._validation import (
    OPEInputError,
    as_float_array,
    check_same_length,
)

__all__ = [
    "NEEDS_REWARD_MODEL",
    "SLOT_ESTIMATOR_NAMES",
    "SlateTerms",
    "SlotEstimator",
    "make_slot_estimators",
]


@dataclass(frozen=True, slots=True)
class SlateTerms:
    """Per-decision terms, all shape ``(m,)`` (see the module docstring for the symbols)."""

    reward: NDArray[np.float64]
    joint_weight: NDArray[np.float64]
    pi_weight: NDArray[np.float64]
    slot_weight: NDArray[np.float64]
    last_weight: NDArray[np.float64]
    independent_ips: NDArray[np.float64]
    cascade_ips: NDArray[np.float64]
    independent_baseline: NDArray[np.float64]
    cascade_baseline: NDArray[np.float64]
    q_logged: NDArray[np.float64]
    q_target: NDArray[np.float64]

    def __post_init__(self) -> None:
        names = list(self.__dataclass_fields__)
        for name in names:
            object.__setattr__(self, name, as_float_array(name, getattr(self, name), 1))
        for name in ("joint_weight", "slot_weight", "last_weight"):
            if getattr(self, name).size and float(getattr(self, name).min()) < 0.0:
                raise OPEInputError(name, f"{name} must be >= 0")
        check_same_length(
            "reward",
            self.reward.shape[0],
            {name: getattr(self, name) for name in names},
        )

    @property
    def n_rounds(self) -> int:
        return int(self.reward.shape[0])

    @property
    def residual(self) -> NDArray[np.float64]:
        return self.reward - self.q_logged


@dataclass(frozen=True)
class SlotEstimator(EstimatorBase[SlateTerms]):
    """One of the estimators of the module docstring, by ``estimator_name``."""

    estimator_name: str = "pi-dr"

    def __post_init__(self) -> None:
        if self.estimator_name not in _TERMS:
            raise OPEInputError(
                "estimators",
                f"unknown estimator {self.estimator_name!r}; choose from {', '.join(SLOT_ESTIMATOR_NAMES)}",
            )

    @property
    def n_components(self) -> int:
        return 2 if self.estimator_name in _RATIOS else 1

    @property
    def weight_name(self) -> str:
        """The importance weight the estimator leans on (what its support diagnostics read)."""
        return _WEIGHT_OF[self.estimator_name]

    def round_components(self, batch: SlateTerms) -> NDArray[np.float64]:
        if self.estimator_name in _RATIOS:
            weight = getattr(batch, _RATIOS[self.estimator_name])
            return np.column_stack((weight * batch.reward, weight))
        terms: NDArray[np.float64] = _TERMS[self.estimator_name](batch)
        return terms[:, None]

    def value_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.estimator_name in _RATIOS:
            return np.asarray(means[..., 0] / means[..., 1])
        return np.asarray(means[..., 0])

    def gradient_from_means(self, means: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.estimator_name in _RATIOS:
            return np.array([1.0 / means[1], -means[0] / means[1] ** 2])
        return np.ones(1)

    def importance_weights(self, batch: SlateTerms) -> NDArray[np.float64] | None:
        return np.asarray(getattr(batch, self.weight_name))


_TERMS = {
    "sips": lambda t: t.joint_weight * t.reward,
    "snsips": lambda t: t.joint_weight * t.reward,
    "iips": lambda t: t.independent_ips,
    "rips": lambda t: t.cascade_ips,
    "pi": lambda t: t.pi_weight * t.reward,
    "snpi": lambda t: t.pi_weight * t.reward,
    "dm": lambda t: t.q_target,
    "dr": lambda t: t.q_target + t.joint_weight * t.residual,
    "idr": lambda t: t.independent_baseline + t.last_weight * t.residual,
    "cdr": lambda t: t.cascade_baseline + t.joint_weight * t.residual,
    "pi-dr": lambda t: t.q_target + t.pi_weight * t.residual,
}
_RATIOS = {"snsips": "joint_weight", "snpi": "pi_weight"}
_WEIGHT_OF = {
    "sips": "joint_weight",
    "snsips": "joint_weight",
    # iips and idr lean on every draw's rho_s with E[rho_s | prefix] = 1: the pseudo-inverse weight
    # 1 + sum_s (rho_s - 1) has mean exactly 1 under that per-draw support (optional stopping: whether
    # draw s happens is known before it). The mean of a decision's ratios, slot_weight, is not 1 in
    # expectation when how many draws a decision makes depends on them (the stop option is a draw)
    "iips": "pi_weight",
    "rips": "joint_weight",
    "pi": "pi_weight",
    "snpi": "pi_weight",
    "dm": "slot_weight",
    "dr": "joint_weight",
    "idr": "pi_weight",
    "cdr": "joint_weight",
    "pi-dr": "pi_weight",
}
SLOT_ESTIMATOR_NAMES: tuple[str, ...] = tuple(_TERMS)
NEEDS_REWARD_MODEL = frozenset({"iips", "rips", "dm", "dr", "idr", "cdr", "pi-dr"})


def make_slot_estimators(
    names: tuple[str, ...] | list[str],
) -> tuple[SlotEstimator, ...]:
    """Estimators for the names of the module docstring's table, in the order given."""
    if not names:
        raise OPEInputError(
            "estimators",
            f"name at least one estimator of {', '.join(SLOT_ESTIMATOR_NAMES)}",
        )
    if len(set(names)) != len(names):
        raise OPEInputError("estimators", f"each estimator may be named once; got {', '.join(names)}")
    return tuple(SlotEstimator(estimator_name=name) for name in names)
