"""obp 0.5.7's keyword arguments beyond the arrays an estimator reads.

obp's estimators take ``**kwargs`` because ``OffPolicyEvaluation`` hands one dict of inputs to
every estimator, each reading what it needs. memabra accepts the same calls: an argument it
supports is used (``context`` and ``action_context`` are checked with the arrays, as features a
reward model would read), one obp uses only for features memabra lacks (``estimated_pscore`` and
its kin) is accepted as ``None``, and anything else is refused with an error that names it, so a
misspelt array is never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memabra.evals.ope._validation import OPEInputError

__all__ = ["bandit_extras", "slate_arrays"]

# features BanditArrays carries: obp's estimators ignore them, memabra checks them with the arrays
_BANDIT_FEATURES = ("context", "action_context")
# what obp reads only for options memabra does not implement (use_estimated_pscore, the
# importance-weight estimators, marginalized IPS); what each would need instead
_OBP_UNSUPPORTED = {
    "estimated_pscore": "obp's use_estimated_pscore; pass the propensities to use as pscore",
    "estimated_importance_weights": "obp's classifier-estimated weights; pass pscore and action_dist",
    "action_embed": "obp's marginalized IPS",
    "pi_b": "obp's marginalized IPS",
    "p_e_a": "obp's marginalized IPS",
}
_SLATE_UNSUPPORTED = {
    "evaluation_policy_action_dist": "obp's slate doubly robust estimators",
    "q_hat": "obp's slate doubly robust estimators",
}
_SLATE_FIELDS = (
    "slate_id",
    "reward",
    "position",
    "pscore",
    "evaluation_policy_pscore",
    "pscore_item_position",
    "evaluation_policy_pscore_item_position",
    "pscore_cascade",
    "evaluation_policy_pscore_cascade",
)
_SLATE_REQUIRED = ("slate_id", "reward", "position")


def _refuse(owner: str, name: str, value: object, unsupported: Mapping[str, str], takes: str) -> None:
    if name in unsupported:
        if value is not None:
            raise OPEInputError(name, f"{owner} does not read {name} ({unsupported[name]}); leave it out or pass None")
        return
    raise OPEInputError(name, f"{owner} got an unknown argument {name!r}; it takes {takes}")


def bandit_extras(owner: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The extra keyword arguments of a bandit estimator's method that memabra keeps (the features);
    raises :class:`OPEInputError` for one it cannot honour."""
    kept: dict[str, Any] = {}
    takes = "action_dist, action, reward, pscore, position, estimated_rewards_by_reg_model, context, action_context"
    for name, value in kwargs.items():
        if name in _BANDIT_FEATURES:
            kept[name] = value
        else:
            _refuse(owner, name, value, _OBP_UNSUPPORTED, takes)
    return kept


def slate_arrays(owner: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arrays of a slate estimator's method that :class:`SlateBatch` takes, each
    required one present; raises :class:`OPEInputError` for a missing or unknown one."""
    for name in _SLATE_REQUIRED:
        if kwargs.get(name) is None:
            raise OPEInputError(name, f"{owner} needs {name}, which was not given")
    kept: dict[str, Any] = {}
    for name, value in kwargs.items():
        if name in _SLATE_FIELDS:
            kept[name] = value
        else:
            _refuse(owner, name, value, _SLATE_UNSUPPORTED, ", ".join(_SLATE_FIELDS))
    return kept
