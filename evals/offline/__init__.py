"""Offline evaluation and off-policy training on the memabra episode log."""

from memabra.evals.offline._additivity import AdditivityReport
from memabra.evals.offline._evaluate import (
    DEFAULT_ESTIMATORS,
    LOGGING_POLICY,
    RECOMMENDED_ESTIMATOR,
    RECOMMENDED_ORDER,
    LogEvaluation,
    LoggedValue,
    Recommended,
    Target,
    evaluate_on_log,
    evaluate_policies,
    logged_value,
)
from memabra.evals.offline._export import (
    EXPORT_FORMAT,
    ExportCursor,
    FinalExport,
    decision_record,
    export_decisions,
    export_final_decisions,
    parse_cursor,
)
from memabra.evals.offline._online import MIN_ONLINE_DECISIONS, CheckedInterval, OnlineCheck, check_online
from memabra.evals.offline._plot import plot_estimates
from memabra.evals.offline._policies import (
    ROUTERS,
    ResolvedPolicy,
    resolve_policy,
    router_from_snapshot,
)
from memabra.evals.offline._slate_model import RewardModelReport
from memabra.evals.offline._support import (
    MAX_FLOOR_SHARE,
    MIN_EFFECTIVE_SAMPLE_SIZE,
    SUPPORT_PROBABILITY,
    SupportVerdict,
    WeightDiagnostics,
)
from memabra.evals.offline._train import TrainReport, train_from_log

__all__ = [
    "DEFAULT_ESTIMATORS",
    "EXPORT_FORMAT",
    "LOGGING_POLICY",
    "MAX_FLOOR_SHARE",
    "MIN_EFFECTIVE_SAMPLE_SIZE",
    "MIN_ONLINE_DECISIONS",
    "RECOMMENDED_ESTIMATOR",
    "RECOMMENDED_ORDER",
    "ROUTERS",
    "SUPPORT_PROBABILITY",
    "AdditivityReport",
    "CheckedInterval",
    "ExportCursor",
    "FinalExport",
    "LogEvaluation",
    "LoggedValue",
    "OnlineCheck",
    "Recommended",
    "ResolvedPolicy",
    "RewardModelReport",
    "SupportVerdict",
    "Target",
    "TrainReport",
    "WeightDiagnostics",
    "check_online",
    "decision_record",
    "evaluate_on_log",
    "evaluate_policies",
    "export_decisions",
    "export_final_decisions",
    "logged_value",
    "parse_cursor",
    "plot_estimates",
    "resolve_policy",
    "router_from_snapshot",
    "train_from_log",
]
