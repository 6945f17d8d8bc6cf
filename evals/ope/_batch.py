"""The per-round record every bandit estimator reads, and how to cut it from obp-style arrays.

Each estimator of the single-action family is a function of five numbers per round: the logged
reward r_i, the logging propensity pi_b(a_i|x_i), the evaluation policy's probability of the
logged action pi_e(a_i|x_i), and two reward-model terms, q_hat(x_i, a_i) and
sum_a pi_e(a|x_i) q_hat(x_i, a). A :class:`RoundBatch` holds exactly those, so a batch can be built
from full ``(n, n_actions, len_list)`` arrays or straight from rows of the decision log.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from memabra.evals.ope._validation import (
    OPEInputError,
    as_distribution_array,
    as_float_array,
    as_index_array,
    check_same_length,
)

__all__ = ["BanditArrays", "RoundBatch", "iter_round_batches"]


@dataclass(frozen=True, slots=True)
class RoundBatch:
    """A chunk of rounds reduced to what the estimators need; validated on construction.

    Fields (all shape ``(m,)``; a field an estimator does not read may be ``None``):

    - ``reward``: r_i.
    - ``pscore``: pi_b(a_i|x_i), in (0, 1].
    - ``evaluation_policy_pscore``: pi_e(a_i|x_i) at the logged position, in [0, 1].
    - ``estimated_reward_factual``: q_hat(x_i, a_i) at the logged position.
    - ``estimated_reward_policy``: sum_a pi_e(a|x_i) q_hat(x_i, a) at the logged position.
    """

    reward: NDArray[np.float64] | None = None
    pscore: NDArray[np.float64] | None = None
    evaluation_policy_pscore: NDArray[np.float64] | None = None
    estimated_reward_factual: NDArray[np.float64] | None = None
    estimated_reward_policy: NDArray[np.float64] | None = None
    # w_i, computed on first use and shared by every estimator (and the diagnostics) reading this batch
    _importance_weight: NDArray[np.float64] | None = field(default=None, init=False, repr=False, compare=False)
    # cut from obp-style arrays: a missing term is then named by the argument the caller left out
    _from_arrays: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        present = {name: getattr(self, name) for name in _ROUND_FIELDS if getattr(self, name) is not None}
        if not present:
            raise OPEInputError("reward", "a RoundBatch needs at least one array; all fields are None")
        checked = {}
        for name, value in present.items():
            if name in _PROBABILITY_FIELDS:
                checked[name] = as_float_array(name, value, 1, low=0.0, high=1.0, low_open=name == "pscore")
            else:
                checked[name] = as_float_array(name, value, 1)
        reference = next(iter(checked))
        check_same_length(reference, checked[reference].shape[0], dict(checked))
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def _from_checked(
        cls,
        *,
        reward: NDArray[np.float64] | None,
        pscore: NDArray[np.float64] | None,
        evaluation_policy_pscore: NDArray[np.float64] | None,
        estimated_reward_factual: NDArray[np.float64] | None,
        estimated_reward_policy: NDArray[np.float64] | None,
    ) -> RoundBatch:
        """A batch cut from a :class:`BanditArrays`, whose construction already checked every input
        these arrays come from; checking the cut again would only repeat those passes."""
        batch = object.__new__(cls)
        set_ = object.__setattr__
        set_(batch, "reward", reward)
        set_(batch, "pscore", pscore)
        set_(batch, "evaluation_policy_pscore", evaluation_policy_pscore)
        set_(batch, "estimated_reward_factual", estimated_reward_factual)
        set_(batch, "estimated_reward_policy", estimated_reward_policy)
        set_(batch, "_importance_weight", None)
        set_(batch, "_from_arrays", True)
        return batch

    @property
    def n_rounds(self) -> int:
        for name in _ROUND_FIELDS:
            value: NDArray[np.float64] | None = getattr(self, name)
            if value is not None:
                return int(value.shape[0])
        return 0

    def require(self, name: str, estimator_name: str) -> NDArray[np.float64]:
        """The field ``name``, or an error saying that ``estimator_name`` needs it (named as the
        caller passed it: the obp-style argument when the batch was cut from arrays)."""
        value: NDArray[np.float64] | None = getattr(self, name)
        if value is None:
            raise self._missing(name, estimator_name)
        return value

    def _missing(self, name: str, estimator_name: str) -> OPEInputError:
        argument = _ARGUMENTS.get(name, name) if self._from_arrays else name
        verb = "were" if " and " in argument else "was"
        return OPEInputError(argument.split(",")[0], f"{estimator_name} needs {argument}, which {verb} not given")

    def importance_weight(self) -> NDArray[np.float64] | None:
        """w_i = pi_e(a_i|x_i) / pi_b(a_i|x_i), or ``None`` when either propensity is missing.

        Computed once per batch and returned read-only, since every caller shares the array.
        """
        if self.pscore is None or self.evaluation_policy_pscore is None:
            return None
        if self._importance_weight is None:
            weight = self.evaluation_policy_pscore / self.pscore
            weight.flags.writeable = False
            object.__setattr__(self, "_importance_weight", weight)
        return self._importance_weight

    def require_importance_weight(self, estimator_name: str) -> NDArray[np.float64]:
        """w_i as :meth:`importance_weight` gives it, or an error naming the missing propensity."""
        weight = self.importance_weight()
        if weight is None:
            raise self._missing(
                "evaluation_policy_pscore" if self.evaluation_policy_pscore is None else "pscore", estimator_name
            )
        return weight


_PROBABILITY_FIELDS = ("pscore", "evaluation_policy_pscore")
# the obp-style argument each term of a batch cut from arrays comes from (pi_e(a_i) from action
# and action_dist; a BanditArrays has action, reward and pscore together or none of them)
_ARGUMENTS = {
    "reward": "action, reward and pscore",
    "pscore": "action, reward and pscore",
    "evaluation_policy_pscore": "action, reward and pscore",
    "estimated_reward_factual": "estimated_rewards_by_reg_model",
    "estimated_reward_policy": "estimated_rewards_by_reg_model",
}
_ROUND_FIELDS = (
    "reward",
    "pscore",
    "evaluation_policy_pscore",
    "estimated_reward_factual",
    "estimated_reward_policy",
)


@dataclass(frozen=True, slots=True)
class BanditArrays:
    """Logged bandit data in the Open Bandit Pipeline's convention, validated on construction.

    - ``action (n,)`` integer in [0, n_actions); ``reward (n,)``; ``pscore (n,)`` in (0, 1].
    - ``action_dist (n, n_actions, len_list)``: pi_e(a|x_i) at each position, summing to 1 over a.
    - ``position (n,)`` in [0, len_list), required when len_list > 1.
    - ``estimated_rewards_by_reg_model (n, n_actions, len_list)``: q_hat(x_i, a, k), optional.
    - ``context (n, d)`` and ``action_context (n_actions, d_a)``: features for a reward model, optional.

    ``action``, ``reward`` and ``pscore`` may be ``None`` for the direct method, which reads only
    ``action_dist`` and the reward model.
    """

    action_dist: NDArray[np.float64]
    action: NDArray[np.int64] | None = None
    reward: NDArray[np.float64] | None = None
    pscore: NDArray[np.float64] | None = None
    position: NDArray[np.int64] | None = None
    estimated_rewards_by_reg_model: NDArray[np.float64] | None = None
    context: NDArray[np.float64] | None = None
    action_context: NDArray[np.float64] | None = None
    # sum_a pi_e(a|x_i, k) for each round and position, from validation; the reward model's policy
    # average divides by it, as obp's np.average does
    _action_dist_sums: NDArray[np.float64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        action_dist, sums = as_distribution_array("action_dist", self.action_dist)
        n_rounds, n_actions, len_list = action_dist.shape
        if n_rounds == 0:
            raise OPEInputError("action", "the log is empty: action_dist has 0 rounds")
        set_ = object.__setattr__
        set_(self, "action_dist", action_dist)
        set_(self, "_action_dist_sums", sums)
        if self.action is not None:
            set_(self, "action", as_index_array("action", self.action, n_actions, "action_dist.shape[1]"))
        for name, ndim in (("reward", 1), ("context", 2), ("estimated_rewards_by_reg_model", 3)):
            value = getattr(self, name)
            if value is not None:
                set_(self, name, as_float_array(name, value, ndim))
        if self.pscore is not None:
            set_(self, "pscore", as_float_array("pscore", self.pscore, 1, low=0.0, high=1.0, low_open=True))
        if self.position is not None:
            set_(self, "position", as_index_array("position", self.position, len_list, "action_dist.shape[2]"))
        elif len_list > 1:
            raise OPEInputError("position", f"position is required when action_dist has len_list={len_list} > 1")
        check_same_length(
            "action_dist",
            n_rounds,
            {
                "action": self.action,
                "reward": self.reward,
                "pscore": self.pscore,
                "position": self.position,
                "estimated_rewards_by_reg_model": self.estimated_rewards_by_reg_model,
                "context": self.context,
            },
        )
        if (
            self.estimated_rewards_by_reg_model is not None
            and self.estimated_rewards_by_reg_model.shape != action_dist.shape
        ):
            raise OPEInputError(
                "estimated_rewards_by_reg_model",
                f"estimated_rewards_by_reg_model must have action_dist's shape {action_dist.shape}; "
                f"got {self.estimated_rewards_by_reg_model.shape}",
            )
        if self.action_context is not None:
            action_context = as_float_array("action_context", self.action_context, 2)
            if action_context.shape[0] != n_actions:
                raise OPEInputError(
                    "action_context",
                    f"action_context must have one row per action ({n_actions}); got {action_context.shape[0]}",
                )
            set_(self, "action_context", action_context)
        logged = {"action": self.action, "reward": self.reward, "pscore": self.pscore}
        missing = [name for name, value in logged.items() if value is None]
        if 0 < len(missing) < len(logged):
            raise OPEInputError(missing[0], f"{missing[0]} is missing; action, reward and pscore come together")

    @property
    def n_rounds(self) -> int:
        return int(self.action_dist.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.action_dist.shape[1])

    @property
    def len_list(self) -> int:
        return int(self.action_dist.shape[2])

    def with_estimated_rewards(self, estimated_rewards: NDArray[np.float64]) -> BanditArrays:
        """A copy whose reward-model predictions are ``estimated_rewards``."""
        return BanditArrays(
            action_dist=self.action_dist,
            action=self.action,
            reward=self.reward,
            pscore=self.pscore,
            position=self.position,
            estimated_rewards_by_reg_model=estimated_rewards,
            context=self.context,
            action_context=self.action_context,
        )

    def round_batch(self, start: int = 0, stop: int | None = None, *, with_reward_model: bool = True) -> RoundBatch:
        """The rounds ``[start, stop)`` reduced to a :class:`RoundBatch` (the per-round gather).

        ``with_reward_model=False`` leaves out the two q_hat terms, for estimators that read none
        (q_hat, when given, was still checked on construction).
        """
        stop = self.n_rounds if stop is None else min(stop, self.n_rounds)
        action_dist = self.action_dist[start:stop]
        _, n_actions, len_list = action_dist.shape
        position = None if self.position is None else self.position[start:stop]
        flat = None
        evaluation_pscore = factual = policy = None
        if self.action is not None:
            flat = _flat_index(self.action[start:stop], position, n_actions, len_list)
            # construction checked action and position, so 'clip' never clips: it only spares
            # take its per-element bounds check
            evaluation_pscore = action_dist.reshape(-1).take(flat, mode="clip")
        q_hat = self.estimated_rewards_by_reg_model
        if q_hat is not None and with_reward_model:
            q_hat = q_hat[start:stop]
            sums = self._action_dist_sums[start:stop]
            if position is None:  # len_list == 1
                pi_at_position, q_at_position, pi_sum = action_dist[:, :, 0], q_hat[:, :, 0], sums[:, 0]
            else:
                index = position[:, None, None]
                pi_at_position = np.take_along_axis(action_dist, index, axis=2)[:, :, 0]
                q_at_position = np.take_along_axis(q_hat, index, axis=2)[:, :, 0]
                pi_sum = np.take_along_axis(sums, position[:, None], axis=1)[:, 0]
            # obp takes np.average(q, weights=pi), i.e. divides by the row sum; so do we
            policy = np.einsum("ij,ij->i", q_at_position, pi_at_position) / pi_sum
            if flat is not None:
                factual = q_hat.reshape(-1).take(flat, mode="clip")
        return RoundBatch._from_checked(
            reward=None if self.reward is None else self.reward[start:stop],
            pscore=None if self.pscore is None else self.pscore[start:stop],
            evaluation_policy_pscore=evaluation_pscore,
            estimated_reward_factual=factual,
            estimated_reward_policy=policy,
        )


def _flat_index(
    action: NDArray[np.int64], position: NDArray[np.int64] | None, n_actions: int, len_list: int
) -> NDArray[np.int64]:
    """Index of (i, a_i, k_i) in an ``(n, n_actions, len_list)`` array flattened in C order:
    (i n_actions + a_i) len_list + k_i. One flat take is several times faster than
    ``array[arange, action, position]``; built in place, so no temporaries of length n."""
    flat = np.arange(action.shape[0], dtype=np.int64)
    flat *= n_actions
    flat += action
    if position is not None:
        flat *= len_list
        flat += position
    return flat


def iter_round_batches(arrays: BanditArrays, batch_size: int) -> Iterator[RoundBatch]:
    """``arrays`` cut into consecutive :class:`RoundBatch` chunks of at most ``batch_size`` rounds."""
    if batch_size < 1:
        raise OPEInputError("batch_size", f"batch_size must be at least 1; got {batch_size}")
    for start in range(0, arrays.n_rounds, batch_size):
        yield arrays.round_batch(start, start + batch_size)
