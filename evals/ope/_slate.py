"""Slate (multi-slot) IPS estimators in obp 0.5.7's long format.

A slate is one decision that fills len_list slots. Its rows share a ``slate_id``; each row is a
slot with its ``position`` l and slot reward r_i(l). The policy value is the expected sum of slot
rewards per slate, V = E_n[ sum_l w_i(l) r_i(l) ], where the estimators differ in w_i(l):

- standard (joint-propensity) IPS, ``pscore``: w_i(l) = pi_e(a_i|x_i) / pi_b(a_i|x_i) over the
  whole slate a_i, the same at every slot; unbiased for any reward structure, high variance.
- independent (per-slot) IPS, ``pscore_item_position``: w_i(l) = pi_e(a_i(l)|x_i) / pi_b(a_i(l)|x_i),
  the marginal of the item in slot l; unbiased when r(l) depends only on slot l's item.
- reward-interaction (cascade) IPS, ``pscore_cascade``: w_i(l) uses the probabilities of the
  items in slots 1..l; unbiased when r(l) depends only on the items at or above slot l.

Chunked (streaming) input must hold whole slates: a slate split across two chunks would count
as two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._base import EstimatorBase
from memabra.evals.ope._interval import IntervalMethod, PolicyValueInterval
from memabra.evals.ope._obp_arguments import slate_arrays
from memabra.evals.ope._validation import (
    OPEInputError,
    as_float_array,
    check_same_length,
)

__all__ = [
    "SlateBatch",
    "SlateEstimator",
    "SlateIndependentIPS",
    "SlateRewardInteractionIPS",
    "SlateStandardIPS",
]

_PSCORE_PAIRS = {
    "pscore": "evaluation_policy_pscore",
    "pscore_item_position": "evaluation_policy_pscore_item_position",
    "pscore_cascade": "evaluation_policy_pscore_cascade",
}


def _integer_column(name: str, value: object) -> NDArray[np.int64]:
    array = np.asarray(value)
    if array.ndim != 1:
        raise OPEInputError(name, f"{name} must be a 1-D array; got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise OPEInputError(name, f"{name} must hold integers; got dtype {array.dtype}")
    if array.size and array.min() < 0:
        raise OPEInputError(name, f"{name} must be >= 0; got {int(array.min())}")
    return array.astype(np.int64, copy=False)


@dataclass(frozen=True, slots=True)
class SlateBatch:
    """Slot-level rows, all shape ``(m,)``; validated on construction.

    ``slate_id``, ``reward`` and ``position`` are required; each estimator reads one pair of
    logging / evaluation propensities (see the module docstring) and the others may be ``None``.
    Logging propensities must lie in (0, 1], evaluation ones in [0, 1].
    """

    slate_id: NDArray[np.int64]
    reward: NDArray[np.float64]
    position: NDArray[np.int64]
    pscore: NDArray[np.float64] | None = None
    evaluation_policy_pscore: NDArray[np.float64] | None = None
    pscore_item_position: NDArray[np.float64] | None = None
    evaluation_policy_pscore_item_position: NDArray[np.float64] | None = None
    pscore_cascade: NDArray[np.float64] | None = None
    evaluation_policy_pscore_cascade: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        slate_id = _integer_column("slate_id", self.slate_id)
        if slate_id.size == 0:
            raise OPEInputError("slate_id", "the log is empty: slate_id has 0 rows")
        set_(self, "slate_id", slate_id)
        set_(self, "position", _integer_column("position", self.position))
        set_(self, "reward", as_float_array("reward", self.reward, 1))
        for behaviour, evaluation in _PSCORE_PAIRS.items():
            for name, low_open in ((behaviour, True), (evaluation, False)):
                value = getattr(self, name)
                if value is not None:
                    value = as_float_array(name, value, 1, low=0.0, high=1.0, low_open=low_open)
                    check_same_length("slate_id", slate_id.shape[0], {name: value})
                    set_(self, name, value)
        check_same_length("slate_id", slate_id.shape[0], {"reward": self.reward, "position": self.position})
        order = np.lexsort((self.position, slate_id))
        same_slate = slate_id[order][1:] == slate_id[order][:-1]
        repeated = same_slate & (self.position[order][1:] == self.position[order][:-1])
        if repeated.any():
            slate = int(slate_id[order][1:][repeated][0])
            raise OPEInputError("position", f"position must not repeat within a slate; slate_id {slate} repeats one")

    @property
    def n_rows(self) -> int:
        return int(self.slate_id.shape[0])

    def require_pair(self, behaviour: str, estimator_name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The logging and evaluation propensities named by ``behaviour``, or a clear error."""
        evaluation = _PSCORE_PAIRS[behaviour]
        pair = getattr(self, behaviour), getattr(self, evaluation)
        for name, value in zip((behaviour, evaluation), pair, strict=True):
            if value is None:
                raise OPEInputError(name, f"{estimator_name} needs {name}, which was not given")
        return pair

    def slate_sums(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Row values summed per slate, in ascending ``slate_id`` order."""
        _, slate_index = np.unique(self.slate_id, return_inverse=True)
        return np.bincount(slate_index, weights=values).astype(np.float64, copy=False)


@dataclass(frozen=True)
class SlateEstimator(EstimatorBase[SlateBatch]):
    """V = E_slates[ sum_l w(l) r(l) ] with the weight read from ``_pscore_field``."""

    _pscore_field: ClassVar[str] = "pscore"

    def round_components(self, batch: SlateBatch) -> NDArray[np.float64]:
        """One component per slate: sum_l w_i(l) r_i(l)."""
        return batch.slate_sums(batch.reward * self._row_weights(batch))[:, None]

    def importance_weights(self, batch: SlateBatch) -> NDArray[np.float64] | None:
        return self._row_weights(batch)

    def _batch(self, arrays: dict[str, NDArray[np.float64] | None]) -> SlateBatch:
        """The batch of obp-style keyword arrays, a missing or unknown one refused by name."""
        return SlateBatch(**slate_arrays(self.estimator_name, arrays))

    def _row_weights(self, batch: SlateBatch) -> NDArray[np.float64]:
        behaviour, evaluation = batch.require_pair(self._pscore_field, self.estimator_name)
        return evaluation / behaviour

    def estimate_policy_value(self, **arrays: NDArray[np.float64] | None) -> float:
        """Keyword arrays as in :class:`SlateBatch` (obp's names); unused pairs may be omitted."""
        return self.policy_value_from_batch(self._batch(arrays))

    def estimate_round_rewards(self, **arrays: NDArray[np.float64] | None) -> NDArray[np.float64]:
        """Per-slate terms sum_l w_i(l) r_i(l), in ascending ``slate_id`` order."""
        return self.round_rewards_from_batch(self._batch(arrays))

    def estimate_interval(
        self,
        *,
        alpha: float = 0.05,
        n_bootstrap_samples: int = 10000,
        random_state: int | None = None,
        method: IntervalMethod | str = IntervalMethod.BOOTSTRAP,
        **arrays: NDArray[np.float64] | None,
    ) -> PolicyValueInterval:
        """The estimate with a ``1 - alpha`` interval; the bootstrap resamples whole slates."""
        return self.interval_from_batch(
            self._batch(arrays),
            alpha=alpha,
            n_bootstrap_samples=n_bootstrap_samples,
            random_state=random_state,
            method=method,
        )


@dataclass(frozen=True)
class SlateStandardIPS(SlateEstimator):
    """Standard slate IPS (SIPS): the joint slate propensity ``pscore``, constant within a slate."""

    estimator_name: str = "sips"

    def _row_weights(self, batch: SlateBatch) -> NDArray[np.float64]:
        behaviour, evaluation = batch.require_pair(self._pscore_field, self.estimator_name)
        for name, value in (("pscore", behaviour), ("evaluation_policy_pscore", evaluation)):
            spread = batch.slate_sums(np.abs(value - _first_in_slate(batch.slate_id, value)))
            if (spread > 0).any():
                raise OPEInputError(name, f"{name} must be the same at every slot of a slate (the joint propensity)")
        return evaluation / behaviour


@dataclass(frozen=True)
class SlateIndependentIPS(SlateEstimator):
    """Independent (per-slot) IPS (IIPS): each slot's marginal ``pscore_item_position``."""

    estimator_name: str = "iips"
    _pscore_field = "pscore_item_position"


@dataclass(frozen=True)
class SlateRewardInteractionIPS(SlateEstimator):
    """Reward-interaction (cascade) IPS (RIPS): ``pscore_cascade``, non-increasing down a slate."""

    estimator_name: str = "rips"
    _pscore_field = "pscore_cascade"

    def _row_weights(self, batch: SlateBatch) -> NDArray[np.float64]:
        behaviour, evaluation = batch.require_pair(self._pscore_field, self.estimator_name)
        order = np.lexsort((batch.position, batch.slate_id))
        same_slate = batch.slate_id[order][1:] == batch.slate_id[order][:-1]
        for name, value in (("pscore_cascade", behaviour), ("evaluation_policy_pscore_cascade", evaluation)):
            rises = same_slate & (value[order][1:] > value[order][:-1])
            if rises.any():
                slate = int(batch.slate_id[order][1:][rises][0])
                raise OPEInputError(
                    name, f"{name} must not increase down a slate (a product over slots); slate_id {slate} does"
                )
        return evaluation / behaviour


def _first_in_slate(slate_id: NDArray[np.int64], values: NDArray[np.float64]) -> NDArray[np.float64]:
    _, first, slate_index = np.unique(slate_id, return_index=True, return_inverse=True)
    return values[first][slate_index]
