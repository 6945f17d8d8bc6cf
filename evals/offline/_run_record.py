"""What a stored offline evaluation keeps beside its estimates, so that it can be read, compared
and rerun weeks later: the paired differences ``ope log`` printed (``versus``), the logging
policy's interval on the same decisions, the weight each row leans on, and how the run was made
(``provenance``: the seed, the interval method, the estimators asked for, whether provisional
rewards were read, the targets evaluated together, the memabra version and, from the command line,
the command and its arguments). ``memabra ope runs`` and the admin read them from each row's
``details``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from statistics import NormalDist
from typing import Any

from memabra._records import OPEResult, new_id
from memabra.evals.offline._evaluation_records import WEIGHT_LABELS, WEIGHTLESS
from memabra.evals.offline._support import finite_or_none
from memabra.evals.ope import PolicyValueInterval, SlotEstimator

__all__ = ["CI_METHOD", "provenance", "versus_json", "with_run_record"]

# every interval of an evaluation on the log: value +- z_(1 - alpha / 2) se, the delta method's se
CI_METHOD = "normal"
CI_DESCRIPTION = "normal (delta-method)"


def provenance(
    seed: int,
    alpha: float,
    include_provisional: bool,
    estimators: Sequence[str],
    targets: Sequence[str],
    invocation: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """How an evaluation was made, the same for each of its targets' runs (``evaluation_id`` ties
    the runs one ``ope log`` stored together, whose ``versus`` name each other)."""
    from memabra import __version__

    return {
        "evaluation_id": new_id(),
        "seed": seed,
        "ci_method": CI_METHOD,
        "ci_description": f"{round(100 * (1 - alpha), 10):g}% {CI_DESCRIPTION}",
        "include_provisional": include_provisional,
        "estimators": list(estimators),
        "targets": list(targets),
        "memabra_version": __version__,
        # the command line's command and arguments (``ope log``, ``train``); null from the API
        "invocation": None if invocation is None else dict(invocation),
    }


def versus_json(versus: Mapping[str, PolicyValueInterval]) -> dict[str, dict[str, float | None]]:
    """Paired differences by the other policy's name, NaN and inf as null."""
    return {
        name: {
            "difference": finite_or_none(d.value),
            "ci_low": finite_or_none(d.ci_low),
            "ci_high": finite_or_none(d.ci_high),
        }
        for name, d in versus.items()
    }


def _weight_label(estimator: str) -> str | None:
    if estimator in WEIGHTLESS:
        return None
    return WEIGHT_LABELS[SlotEstimator(estimator_name=estimator).weight_name]


def with_run_record(
    results: Sequence[OPEResult],
    versus: Mapping[str, PolicyValueInterval],
    logging_value: float,
    logging_stderr: float,
    alpha: float,
    made: Mapping[str, Any],
) -> tuple[OPEResult, ...]:
    """The stored rows with the paired differences (empty where the target is unsupported: it is
    compared with nothing), the logging policy's ``1 - alpha`` interval on the same decisions,
    the label of the weight each row's estimator leans on (its ESS is under
    ``details.diagnostics``; null for the direct method) and ``made``, the run's provenance."""
    half = NormalDist().inv_cdf(1.0 - alpha / 2.0) * logging_stderr
    record = {
        "versus": versus_json(versus),
        "logging_stderr": finite_or_none(logging_stderr),
        "logging_ci_low": finite_or_none(logging_value - half),
        "logging_ci_high": finite_or_none(logging_value + half),
        "provenance": dict(made),
    }
    return tuple(replace(r, details={**r.details, **record, "weight": _weight_label(r.estimator)}) for r in results)
