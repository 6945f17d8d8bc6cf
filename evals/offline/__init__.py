"""Offline evaluation and off-policy training on the memabra episode log."""

from memabra.evals.offline._evaluate import LogEvaluation, evaluate_on_log, logged_round_batches, logged_value, target_pscore
from memabra.evals.offline._plot import plot_estimates
from memabra.evals.offline._policies import ROUTERS, ResolvedPolicy, resolve_policy, router_from_snapshot
from memabra.evals.offline._train import TrainReport, train_from_log

__all__ = [
    "ROUTERS",
    "LogEvaluation",
    "ResolvedPolicy",
    "TrainReport",
    "evaluate_on_log",
    "logged_round_batches",
    "logged_value",
    "plot_estimates",
    "resolve_policy",
    "router_from_snapshot",
    "target_pscore",
    "train_from_log",
]
