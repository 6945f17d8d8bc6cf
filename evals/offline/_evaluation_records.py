"""What an offline evaluation returns: the targets, each one's estimates, diagnostics and the
recommended estimate (:mod:`memabra.evals.offline._evaluate` computes them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from memabra._records import OPEResult
from memabra.evals.offline._additivity import AdditivityReport
from memabra.evals.offline._slate_model import RewardModelReport
from memabra.evals.offline._support import SupportVerdict, WeightDiagnostics, finite_or_none
from memabra.evals.ope import PolicyValueInterval, SlotEstimator
from memabra.router import Router

__all__ = [
    "LOGGING_POLICY",
    "OWN_ORDER",
    "SET_EQUIVALENT",
    "WEIGHTLESS",
    "WEIGHT_LABELS",
    "LogEvaluation",
    "LoggedValue",
    "Recommended",
    "Target",
]

# how a deterministic target's draws are replayed (docs/ope.md): in proportion to the logger's own
# probabilities within the target's set, or in the target's own order
SET_EQUIVALENT = "set-equivalent"
OWN_ORDER = "own order"
# the key of a target's paired difference against the policy that wrote the log
LOGGING_POLICY = "logging policy"
# each importance weight's name in the diagnostics, the table and the verdicts' reasons
WEIGHT_LABELS = {
    "joint_weight": "joint",
    "pi_weight": "pseudo-inverse",
    "slot_weight": "per-slot",
}


# the estimators whose gap from cascade DR on the same decisions judges them and the JSON's
# diagnostics keep (memabra.evals.offline._bias.BIAS_GAPS)
GAP_NAMES = ("pi", "pi-dr", "iips", "idr")


def _gap_json(gap: PolicyValueInterval | None) -> dict[str, float | None] | None:
    if gap is None:
        return None
    return {
        "difference": finite_or_none(gap.value),
        "ci_low": finite_or_none(gap.ci_low),
        "ci_high": finite_or_none(gap.ci_high),
    }


# estimators that weight no decision (the direct method): never supported; the floor and skill rules
# name the first reason where they fail
WEIGHTLESS = frozenset({"dm"})


@dataclass(frozen=True, slots=True)
class Target:
    """A policy to evaluate: its display name, the router and the snapshot it came from."""

    policy: str
    router: Router
    snapshot_version: str | None = None


class LoggedValue(NamedTuple):
    """The logging policy's value on a slice of the log: the mean logged reward, its standard
    error and the number of rewarded decisions (a tuple, so ``value, stderr, n = ...`` unpacks it).
    ``value`` and ``stderr`` are NaN when no decision was read, ``stderr`` infinite for one."""

    value: float
    stderr: float
    n_rounds: int


@dataclass(frozen=True, slots=True)
class Recommended:
    estimator: str
    value: float
    ci_low: float
    ci_high: float
    supported: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "supported": self.supported,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class LogEvaluation:
    """Every estimate of one target on a slice of the log, its diagnostics and the recommendation."""

    policy: str
    snapshot_version: str | None
    n_rounds: int
    logging_value: float
    estimates: Mapping[str, PolicyValueInterval]
    recommended: Recommended
    # each importance weight's, by its label ("joint", "pseudo-inverse", "per-slot")
    diagnostics: Mapping[str, WeightDiagnostics]
    floor_share: float
    reward_model: RewardModelReport | None
    results: tuple[OPEResult, ...]
    replay: str = SET_EQUIVALENT
    additivity: AdditivityReport | None = None
    # the share of the target's probability the recommended interval is widened for: where
    # unsupported the bounds' share (memabra.evals.offline._support.unreached_share), where supported
    # the share its sample shows unreached (missing_share)
    unreached_share: float = 0.0
    # this target's recommended value minus each other supported target's and the logging policy's,
    # paired on the same decisions (memabra.evals.offline._paired); empty where unsupported
    versus: Mapping[str, PolicyValueInterval] = field(default_factory=dict)
    # each estimator's own support verdict (its weight's; the recommended one's, before widening)
    verdicts: Mapping[str, SupportVerdict] = field(default_factory=dict)
    # the standard error of logging_value, the mean logged reward of the same decisions
    logging_stderr: float = math.nan
    # rewarded decisions left out because their reward is provisional (0 with include_provisional)
    n_provisional: int = 0
    # cascade DR minus each of PI, PI-DR, IIPS and IDR on the same decisions, paired, by estimator: its
    # bias where the log supports cascade DR (memabra.evals.offline._bias.sequential_bias_verdict)
    gaps: Mapping[str, PolicyValueInterval] = field(default_factory=dict)
    # IIPS's and IDR's slot sum q_0 + sum_s Q_s minus the direct method on the same decisions, paired:
    # the model's part of their bias (memabra.evals.offline._bias.slot_sum_verdict)
    slot_gap: PolicyValueInterval | None = None
    # how the evaluation was made (seed, interval method, estimators, targets, command), as its stored
    # runs keep it (memabra.evals.offline._run_record.provenance)
    provenance: Mapping[str, Any] = field(default_factory=dict)

    @property
    def pi_gap(self) -> PolicyValueInterval | None:
        """Cascade DR minus PI on the same decisions; ``None`` where not computed."""
        return self.gaps.get("pi")

    def weight_diagnostics(self, estimator: str) -> WeightDiagnostics | None:
        """The diagnostics of the importance weight ``estimator`` leans on; ``None`` for the direct
        method, which weights no decision (another weight's figures would read as its own)."""
        if estimator in WEIGHTLESS:
            return None
        return self.diagnostics[WEIGHT_LABELS[SlotEstimator(estimator_name=estimator).weight_name]]

    def _estimate_json(self, name: str, estimate: PolicyValueInterval) -> dict[str, Any]:
        verdict = self.verdicts.get(name)
        return {
            "value": estimate.value,
            "ci_low": estimate.ci_low,
            "ci_high": estimate.ci_high,
            "supported": None if verdict is None else verdict.supported,
            "reason": None if verdict is None else verdict.reason,
        }

    def as_json(self) -> dict[str, Any]:
        """The per-policy block of ``memabra ope log --json``; other tools read these names."""
        return {
            "snapshot_version": self.snapshot_version,
            "n_rounds": self.n_rounds,
            "n_provisional_left_out": self.n_provisional,
            "recommended": self.recommended.as_dict(),
            "estimates": {name: self._estimate_json(name, e) for name, e in self.estimates.items()},
            "versus": {
                name: {"difference": d.value, "ci_low": d.ci_low, "ci_high": d.ci_high}
                for name, d in self.versus.items()
            },
            "diagnostics": {
                "replay": self.replay,
                "floor_share": self.floor_share,
                "unreached_share": self.unreached_share,
                "additivity": self.additivity.as_dict() if self.additivity else None,
                # cdr_minus_pi, cdr_minus_pi_dr, cdr_minus_iips, cdr_minus_idr
                **{f"cdr_minus_{name.replace('-', '_')}": _gap_json(self.gaps.get(name)) for name in GAP_NAMES},
                "slot_sum_minus_dm": _gap_json(self.slot_gap),
                **{
                    name: {k: finite_or_none(v) for k, v in d.as_dict().items()} for name, d in self.diagnostics.items()
                },
            },
        }
