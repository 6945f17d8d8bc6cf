"""What a stored offline evaluation keeps beside its estimates, so that it can be read, compared
and rerun weeks later: the paired differences ``ope log`` printed (``versus``), the logging
policy's interval on the same decisions, the weight each row leans on, and how the run was made
(``provenance``: the seed, the interval method, the estimators asked for, whether provisional
rewards were read, the targets evaluated together, the memabra version and, from the command line,
the command and its arguments). ``memabra ope runs`` and the admin read them from each row's
``details``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from statistics import NormalDist
from typing import Any

from memabra._records import OPEResult, new_id
from memabra.evals.offline._evaluation_records import WEIGHT_LABELS, WEIGHTLESS
from memabra.evals.offline._support import finite_or_none
from memabra.evals.ope import PolicyValueInterval, SlotEstimator
from memabra.storage._engine import mask_password

__all__ = ["CI_METHOD", "provenance", "recordable", "reward_scales_json", "versus_json", "with_run_record"]

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
        # each as its stored runs name it (a secret in a router's arguments masked, as in ``policy``)
        "targets": [recordable(t) for t in targets],
        "memabra_version": __version__,
        # the command line's command and arguments (``ope log``, ``train``); null from the API.
        # Kept as JSON can hold it and with secrets masked: it is stored for anyone reading the log
        "invocation": None if invocation is None else recordable(dict(invocation)),
    }


# a JSON key whose value is a secret (router or learner arguments: {"api_key": ...}), matched in a
# mapping's keys and, for arguments given as JSON text (--args, --policy module:Class:{...}), in it;
# a whole word of the key (``max_tokens`` is not one)
_SECRET_WORD = r"(?:password|passwd|passphrase|secret|token|api[_-]?key|apikey|credentials?|private[_-]?key)"
_SECRET_KEY = re.compile(rf"(?i)(?:^|[_\W]){_SECRET_WORD}(?:$|[_\W])")
_SECRET_IN_JSON = re.compile(
    rf'(?i)("(?:[^"]*[_\W])?{_SECRET_WORD}(?:[_\W][^"]*)?"\s*:\s*)("(?:[^"\\]|\\.)*"|[^,}}\]\s]+)'
)


def recordable(value: Any) -> Any:
    """``value`` as a stored run may keep it for anyone who reads the log: JSON only (a datetime,
    a path or another object by its text, NaN and inf as null, so the store after minutes of
    evaluation cannot fail on it) and no secret: a URL's password (``user:PASSWORD@``,
    ``?password=``) and the value of a key that names one (``api_key``, ``token``, ...) masked, in
    mappings and in JSON text alike (a ``--policy`` or ``--args`` holding a service's URL or key)."""
    if isinstance(value, Mapping):
        return {
            str(k): "***" if _SECRET_KEY.search(str(k)) and v is not None else recordable(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [recordable(v) for v in items]
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    text = value if isinstance(value, str) else str(value)
    return _SECRET_IN_JSON.sub(r'\1"***"', mask_password(text))


def versus_json(versus: Mapping[str, PolicyValueInterval]) -> dict[str, dict[str, float | None]]:
    """Paired differences by the other policy's name (as its stored run names it), NaN and inf as null."""
    return {
        recordable(name): {
            "difference": finite_or_none(d.value),
            "ci_low": finite_or_none(d.ci_low),
            "ci_high": finite_or_none(d.ci_high),
        }
        for name, d in versus.items()
    }


def reward_scales_json(scales: Iterable[tuple[str, Mapping[str, float]]]) -> list[dict[str, Any]]:
    """The (reward version, weights) pairs of the rewards a run read, as it keeps them
    (``details.reward_scales``), in a stable order. ``ope online`` compares its snapshot's online
    rewards with these rather than with the log as it reads later: ``memabra rewards recompute``
    re-totals the stored rewards in place (the documented way to change the weights), and a
    re-total after the run would else pass as the scale the run read."""
    kept = {
        (str(version), tuple(sorted((str(k), float(v)) for k, v in dict(weights).items())))
        for version, weights in scales
    }
    return [{"version": version, "weights": dict(weights)} for version, weights in sorted(kept)]


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
    reward_scales: Iterable[tuple[str, Mapping[str, float]]] | None = None,
) -> tuple[OPEResult, ...]:
    """The stored rows with the paired differences (empty where the target is unsupported: it is
    compared with nothing), the logging policy's ``1 - alpha`` interval on the same decisions,
    the label of the weight each row's estimator leans on (its ESS is under
    ``details.diagnostics``; null for the direct method), ``made``, the run's provenance, and
    ``reward_scales``, the (reward version, weights) of the rewards it read where the caller
    collected them (:func:`reward_scales_json`; left out by runs that did not). A
    target named with a secret in its arguments (``module:Class:{"api_key": ...}``) is stored
    under its name with the secret masked: the log is read by whoever may list its runs."""
    half = NormalDist().inv_cdf(1.0 - alpha / 2.0) * logging_stderr
    record = {
        "versus": versus_json(versus),
        "logging_stderr": finite_or_none(logging_stderr),
        "logging_ci_low": finite_or_none(logging_value - half),
        "logging_ci_high": finite_or_none(logging_value + half),
        "provenance": dict(made),
    }
    if reward_scales is not None:
        record["reward_scales"] = reward_scales_json(reward_scales)
    return tuple(
        replace(r, policy=recordable(r.policy), details={**r.details, **record, "weight": _weight_label(r.estimator)})
        for r in results
    )
