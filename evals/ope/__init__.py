"""Offline policy evaluation: obp-compatible estimators, intervals, diagnostics and streaming.

Array names and shapes follow the Open Bandit Pipeline (obp 0.5.7), and point estimates equal
obp's on the same inputs: ``action (n,)``, ``reward (n,)``, ``pscore (n,)``,
``action_dist (n, n_actions, len_list)``, ``position (n,)`` and
``estimated_rewards_by_reg_model (n, n_actions, len_list)``; slates use obp's long format
(``slate_id``, ``position``, ``pscore`` / ``pscore_item_position`` / ``pscore_cascade`` and their
``evaluation_policy_*`` counterparts).

Each estimator also reduces a :class:`RoundBatch` (or :class:`SlateBatch`) to a few per-round
components, which is what :class:`StreamingEstimate` accumulates chunk by chunk.
"""

from memabra.evals.ope._arrays import (
    ESTIMATOR_NAMES,
    ArraysReport,
    EstimatorSettings,
    evaluate_bandit_arrays,
    load_bandit_arrays,
    make_estimators,
)
from memabra.evals.ope._base import ComponentEstimator
from memabra.evals.ope._batch import BanditArrays, RoundBatch, iter_round_batches
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
from memabra.evals.ope._interval import IntervalMethod, PolicyValueInterval, check_alpha
from memabra.evals.ope._reward_model import CrossFittedRewardModel
from memabra.evals.ope._slate import (
    SlateBatch,
    SlateEstimator,
    SlateIndependentIPS,
    SlateRewardInteractionIPS,
    SlateStandardIPS,
)
from memabra.evals.ope._slot import (
    NEEDS_REWARD_MODEL,
    SLOT_ESTIMATOR_NAMES,
    SlateTerms,
    SlotEstimator,
    make_slot_estimators,
)
from memabra.evals.ope._streaming import StreamingEstimate, estimate_streaming
from memabra.evals.ope._synthetic import SyntheticBandit, SyntheticLog, SyntheticSlateBandit
from memabra.evals.ope._validation import OPEInputError

__all__ = [
    "ESTIMATOR_NAMES",
    "NEEDS_REWARD_MODEL",
    "SLOT_ESTIMATOR_NAMES",
    "SlateTerms",
    "SlotEstimator",
    "check_alpha",
    "make_slot_estimators",
    "ArraysReport",
    "BanditArrays",
    "BanditEstimator",
    "ComponentEstimator",
    "CrossFittedRewardModel",
    "DirectMethod",
    "DoublyRobust",
    "DoublyRobustWithShrinkage",
    "EstimatorSettings",
    "ImportanceWeightDiagnostics",
    "IntervalMethod",
    "InverseProbabilityWeighting",
    "OPEInputError",
    "PolicyValueInterval",
    "RoundBatch",
    "SelfNormalizedDoublyRobust",
    "SelfNormalizedInverseProbabilityWeighting",
    "SlateBatch",
    "SlateEstimator",
    "SlateIndependentIPS",
    "SlateRewardInteractionIPS",
    "SlateStandardIPS",
    "StreamingEstimate",
    "SwitchDoublyRobust",
    "SyntheticBandit",
    "SyntheticLog",
    "SyntheticSlateBandit",
    "estimate_streaming",
    "evaluate_bandit_arrays",
    "iter_round_batches",
    "load_bandit_arrays",
    "make_estimators",
]
