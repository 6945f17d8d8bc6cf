"""What a stored offline evaluation keeps beside its estimates, as the policies page reads it
(``evals/offline/_run_record.py`` writes it): the paired differences ``ope log`` printed
(``versus``), the logging policy's interval on the same decisions, the weight an estimate leans on
and its effective sample size, how the run was made (``provenance``: seed, interval method, the
targets evaluated together, the command) and, for ``train --from-log``, what was trained.

A run stored before these were kept has none of them: each reads ``None`` here and "not recorded"
on the page, never as a figure. The paired verdicts are worded as ``memabra ope runs`` and ``ope
log`` word them (:func:`memabra._cli._offline_report.paired_verdict`).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memabra._cli._offline_report import paired_verdict
from memabra._records import OPEResult

__all__ = [
    "json_number",
    "json_time",
    "LOGGING_POLICY",
    "NOT_RECORDED",
    "Paired",
    "Provenance",
    "RunRecord",
    "Training",
    "command_line",
    "paired_with",
    "renamed",
    "run_record",
]

# memabra.evals.offline.LOGGING_POLICY, the name ``versus`` files the logging policy under (that
# package loads scikit-learn, which the admin view does not need)
LOGGING_POLICY = "logging policy"


@dataclass(frozen=True, slots=True)
class Paired:
    """A target minus another policy on the same decisions, and what its interval says."""

    other: str
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    # paired_verdict's words ("X better", "not distinguishable on this log"); "" without finite bounds
    verdict: str

    @property
    def difference_text(self) -> str:
        return _signed(self.difference)

    @property
    def interval_text(self) -> str:
        return f"[{_signed(self.ci_low)}, {_signed(self.ci_high)}]"

    @property
    def text(self) -> str:
        """``+0.0123 [-0.0100, +0.0300]: not distinguishable on this log``."""
        figures = f"{self.difference_text} {self.interval_text}"
        return f"{figures}: {self.verdict}" if self.verdict else f"{figures}: no finite interval"


@dataclass(frozen=True, slots=True)
class Provenance:
    """How a run was made, the same for every run of one evaluation."""

    evaluation_id: str | None
    seed: int | None
    ci_method: str | None
    ci_description: str | None
    include_provisional: bool | None
    estimators: tuple[str, ...]
    targets: tuple[str, ...]
    memabra_version: str | None
    # the command line rebuilt from the recorded command and options; None: made through the library
    command: str | None


@dataclass(frozen=True, slots=True)
class Training:
    """What ``train --from-log`` trained before its evaluation judged it."""

    learner: str
    learner_args: str
    holdout: float | None
    split_at: datetime | None
    n_train: int | None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One stored row's record; every field ``None`` on a row stored before it was kept."""

    # None: not recorded; (): the target was unsupported, so compared with nothing
    versus: tuple[Paired, ...] | None = None
    logging_ci_low: float | None = None
    logging_ci_high: float | None = None
    weight_recorded: bool = False
    weight: str | None = None  # the weight the row's estimator leans on; None for the direct method
    effective_sample_size: float | None = None
    provenance: Provenance | None = None
    training: Training | None = None

    def against(self, other: str) -> Paired | None:
        return next((p for p in self.versus or () if p.other == other), None)

    @property
    def versus_logging(self) -> Paired | None:
        return self.against(LOGGING_POLICY)

    @property
    def versus_targets(self) -> tuple[Paired, ...]:
        return tuple(p for p in self.versus or () if p.other != LOGGING_POLICY)

    @property
    def logging_interval_recorded(self) -> bool:
        return self.logging_ci_low is not None and self.logging_ci_high is not None

    @property
    def ess_text(self) -> str:
        """The effective sample size the estimate rests on, in words."""
        if not self.weight_recorded:
            return "ESS not recorded"
        if self.weight is None:
            return "no weight (direct method): no ESS"
        if self.effective_sample_size is None:
            return f"ESS of the {self.weight} weight not recorded"
        return f"ESS {self.effective_sample_size:.0f} ({self.weight} weight)"


NOT_RECORDED = RunRecord()


def run_record(result: OPEResult, target: str) -> RunRecord:
    """``result``'s record (``target``: how its verdicts name the policy it evaluated)."""
    d = result.details
    made = _provenance(d.get("provenance"))
    weight_recorded = "weight" in d and (d["weight"] is None or isinstance(d["weight"], str))
    weight = d.get("weight") if weight_recorded else None
    return RunRecord(
        versus=_versus(d.get("versus"), target, () if made is None else made.targets),
        logging_ci_low=json_number(d.get("logging_ci_low")),
        logging_ci_high=json_number(d.get("logging_ci_high")),
        weight_recorded=weight_recorded,
        weight=weight,
        effective_sample_size=_ess(d.get("diagnostics"), weight),
        provenance=made,
        training=_training(d.get("training")),
    )


def _versus(value: Any, target: str, targets: Sequence[str]) -> tuple[Paired, ...] | None:
    if not isinstance(value, Mapping):
        return None
    paired = []
    for other, figures in value.items():
        if not isinstance(figures, Mapping):
            continue
        difference, low, high = (json_number(figures.get(key)) for key in ("difference", "ci_low", "ci_high"))
        paired.append(paired_with(target, str(other), difference, low, high))
    # the other targets in the order they were named, the logging policy last, as ope log prints
    # them (PostgreSQL's JSON keeps no order of its own)
    order = {name: i for i, name in enumerate(targets)}
    return tuple(sorted(paired, key=lambda p: (p.other == LOGGING_POLICY, order.get(p.other, len(order)), p.other)))


def _ess(diagnostics: Any, weight: Any) -> float | None:
    if not isinstance(diagnostics, Mapping) or not isinstance(weight, str):
        return None
    figures = diagnostics.get(weight)
    return json_number(figures.get("effective_sample_size")) if isinstance(figures, Mapping) else None


def _provenance(value: Any) -> Provenance | None:
    if not isinstance(value, Mapping):
        return None
    seed, provisional = value.get("seed"), value.get("include_provisional")
    return Provenance(
        evaluation_id=_text(value.get("evaluation_id")),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        ci_method=_text(value.get("ci_method")),
        ci_description=_text(value.get("ci_description")),
        include_provisional=provisional if isinstance(provisional, bool) else None,
        estimators=_names(value.get("estimators")),
        targets=_names(value.get("targets")),
        memabra_version=_text(value.get("memabra_version")),
        command=command_line(value.get("invocation")),
    )


def command_line(invocation: Any) -> str | None:
    """The command a run was made with, as a shell line rebuilt from its recorded options (every
    option's value, defaults included, by name as the command line records them: PostgreSQL's JSON
    keeps no order; ``None`` values and false flags left out); ``None`` for a run made through the
    library, which records no command."""
    if not isinstance(invocation, Mapping) or not isinstance(invocation.get("command"), str):
        return None
    words = [invocation["command"]]
    arguments = invocation.get("arguments")
    for name, value in sorted(arguments.items() if isinstance(arguments, Mapping) else ()):
        option = "--" + str(name).replace("_", "-")
        for one in value if isinstance(value, list) else [value]:
            if one is None or one is False:
                continue
            if one is True:
                words.append(option)
            else:
                shown = one if isinstance(one, str) else json.dumps(one)
                words += [option, shlex.quote(shown)]
    return " ".join(words)


def _training(value: Any) -> Training | None:
    if not isinstance(value, Mapping):
        return None
    n_train = value.get("n_train")
    return Training(
        learner=str(value.get("learner") or "–"),
        learner_args=json.dumps(value.get("learner_args") or {}, sort_keys=True),
        holdout=json_number(value.get("holdout")),
        split_at=json_time(value.get("split_at")),
        n_train=n_train if isinstance(n_train, int) and not isinstance(n_train, bool) else None,
    )


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, Sequence) and not isinstance(value, str) else ()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def json_number(value: Any) -> float | None:
    """A stored JSON number (``None`` for a missing one, a bool, text or an integer no float holds)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past 1e308: JSON allows it, a float cannot hold it
        return None


def json_time(value: Any) -> datetime | None:
    """A stored ISO 8601 time in UTC (one without a zone is UTC; ``None`` for a missing or bad one)."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: a zone that moves it past year 1 or 9999
        return None


def _signed(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:+.4f}"


def paired_with(target: str, other: str, difference: float | None, low: float | None, high: float | None) -> Paired:
    """``target`` minus ``other``, with the verdict ``ope log`` prints for its interval."""
    verdict = ""
    if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
        verdict = paired_verdict(target, other, low, high)
    return Paired(other, difference, low, high, verdict)


def renamed(paired: Paired, target: str, other: str | None = None) -> Paired:
    """``paired`` as the difference of ``target`` and ``other`` (its own other's name when
    omitted), its verdict worded with those names."""
    return paired_with(
        target, paired.other if other is None else other, paired.difference, paired.ci_low, paired.ci_high
    )
