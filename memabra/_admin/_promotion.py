"""What offline evaluation says about promoting a snapshot, shown next to its Promote button and
in the confirmation: its latest recommended estimate against the logging policy, whether the log
supports that estimate, and whether ``memabra train --from-log --force`` saved it against its
verdict. Promoting is never refused here (an operator may know better), but an unsupported,
forced or unevaluated snapshot is said to be one before anything changes.

The estimate comes from the snapshot's latest stored evaluation run with a recommended estimate,
else from the metrics ``train --from-log`` stored with it (``verdict``, ``estimator``,
``supported``, ``estimate``, ``ci_low``, ``ci_high``, ``logging_value``, ``improvement``), else
from its latest run of any kind (stored before runs recorded a recommendation). "Forced" is read
from the metrics' ``verdict`` (``forced: ...``) whichever source gave the estimate.

Beside the estimate, what a promote relies on most: its difference from the logging policy paired
on the same decisions (the run's ``versus``, or the metrics' ``improvement``) and, where the same
evaluation also scored the policy's active snapshot, its paired difference from that snapshot,
each with the verdict ``memabra ope log`` prints. A run stored before paired differences were kept
says so rather than showing none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memabra._admin._ope_record import LOGGING_POLICY, NOT_RECORDED, Paired, RunRecord, paired_with, renamed
from memabra._admin._ope_views import OPERun, versus_logging
from memabra._admin._views import format_time, truncate

__all__ = ["PromotionCheck", "promotion_check"]

# How much of a verdict's reason the confirmation dialog quotes (the table shows it whole).
_REASON_IN_DIALOG = 400
_FORCED = "forced: "


@dataclass(frozen=True, slots=True)
class PromotionCheck:
    """A snapshot's offline-evaluation verdict, as the promote action shows it."""

    version: str
    source: str  # where the estimate comes from, in words ("" when nothing evaluated it)
    estimator: str = ""
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    logging_value: float | None = None
    supported: bool | None = None
    reason: str = ""
    forced: bool = False
    forced_verdict: str = ""
    # the estimate minus the logging policy's value, paired on the same decisions, and why it is
    # missing where it is ("" when shown, or when nothing evaluated the snapshot)
    paired_logging: Paired | None = None
    logging_note: str = ""
    # the active snapshot it would replace (None: none, or this one), and the estimate minus that
    # snapshot's in the same evaluation, or why there is none
    active: str | None = None
    paired_active: Paired | None = None
    active_note: str = ""
    # the run's record: its interval method, effective sample size, seed and command
    record: RunRecord = NOT_RECORDED

    @property
    def how(self) -> str:
        """How the estimate's interval was computed and on how many effective decisions."""
        if not self.evaluated or self.record is NOT_RECORDED:
            return ""
        made = self.record.provenance
        method = made.ci_description if made is not None and made.ci_description else "interval method not recorded"
        return f"{method} · {self.record.ess_text}"

    @property
    def evaluated(self) -> bool:
        return self.estimate is not None

    @property
    def versus(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return ""
        return versus_logging(self.supported, self.ci_low, self.ci_high, self.logging_value)

    @property
    def concerning(self) -> bool:
        """Whether the evaluation itself argues against promoting: unsupported, or forced."""
        return self.supported is False or self.forced

    @property
    def warnings(self) -> tuple[str, ...]:
        """What should give an operator pause, in plain words (empty: a supported estimate)."""
        found = []
        if not self.evaluated:
            found.append("no offline evaluation of this snapshot is stored: nothing says how it compares")
        elif self.supported is False:
            found.append("its estimate is UNSUPPORTED: the log cannot say how this snapshot would do")
        elif self.supported is None:
            found.append("its evaluation recorded no support verdict")
        if self.forced:
            # the verdict's first clause ("unsupported", "does not beat logging policy"): the reason
            # behind it is quoted once, above
            verdict = self.forced_verdict.split(":", 1)[0]
            found.append(f"it was FORCED: train --from-log --force saved it although its verdict was “{verdict}”")
        return tuple(found)

    def confirmation(self, replaces: str | None = None) -> str:
        """The text of the Promote button's confirmation dialog (``replaces``: the policy's active
        snapshot, which the promote retires and a roll back returns to)."""
        lines = [f"Make {self.version} the active policy?"]
        if replaces is not None:
            lines.append(f"It replaces {replaces}, active now (Roll back returns to {replaces}).")
        lines.append("")
        if self.evaluated:
            lines.append(f"Offline evaluation ({self.source}): {self._estimate_text()}.")
            for paired in (self.paired_logging, self.paired_active):
                if paired is not None:
                    lines.append(f"Paired on the same decisions, minus {_other(paired)}: {paired.text}.")
            if self.supported is False and self.reason:
                lines.append(f"Unsupported: {truncate(self.reason, _REASON_IN_DIALOG)}")
        for warning in self.warnings:
            lines.append(f"WARNING: {warning}.")
        if self.warnings:
            lines += ["", "Promote it anyway?"]
        return "\n".join(lines)

    def _estimate_text(self) -> str:
        text = f"{self.estimator} estimate {_fixed(self.estimate)} [{_fixed(self.ci_low)}, {_fixed(self.ci_high)}]"
        if self.logging_value is not None:
            text += f" against the logging policy's {_fixed(self.logging_value)}"
        return text + (f": {self.versus}" if self.versus else "")


def promotion_check(
    version: str, metrics: Mapping[str, Any], runs: Sequence[OPERun], active: str | None = None
) -> PromotionCheck:
    """What the page says about promoting ``version`` (``runs``: stored runs, newest first;
    ``active``: the snapshot of its policy active now, which the promote would replace)."""
    check = _estimate(version, metrics, runs, None if active == version else active)
    forced_verdict = _forced_verdict(metrics)
    if forced_verdict is None:
        return check
    return replace(check, forced=True, forced_verdict=forced_verdict)


def _estimate(version: str, metrics: Mapping[str, Any], runs: Sequence[OPERun], active: str | None) -> PromotionCheck:
    own = [run for run in runs if run.headline.result.snapshot_version == version]
    recommended = next((run for run in own if run.headline.recommended), None)
    if recommended is not None:
        return _from_run(version, recommended, runs, active)
    if isinstance(metrics.get("estimate"), (int, float)):
        return _from_metrics(version, metrics, active)
    if own:
        return _from_run(version, own[0], runs, active)
    return PromotionCheck(version, "", active=active)


def _from_run(version: str, run: OPERun, runs: Sequence[OPERun], active: str | None) -> PromotionCheck:
    row = run.headline
    r = row.result
    record = row.record
    kind = "" if row.recommended else ", no recommended estimate recorded"
    paired_logging = record.versus_logging
    paired_active, active_note = _versus_active(version, run, runs, active)
    return PromotionCheck(
        version,
        source=f"run {r.run_id[:8]} of {format_time(run.created_at)} UTC{kind}",
        estimator=r.estimator,
        estimate=r.value,
        ci_low=r.ci_low,
        ci_high=r.ci_high,
        logging_value=row.logging_value,
        supported=row.target_supported,
        reason=row.target_reason,
        paired_logging=None if paired_logging is None else renamed(paired_logging, version, LOGGING_POLICY),
        logging_note="" if paired_logging is not None else _missing(record),
        active=active,
        paired_active=paired_active,
        active_note=active_note,
        record=record,
    )


def _versus_active(version: str, run: OPERun, runs: Sequence[OPERun], active: str | None) -> tuple[Paired | None, str]:
    """The run's paired difference from the active snapshot's run of the same evaluation, or why
    there is none ("" where no other snapshot is active)."""
    if active is None:
        return None, ""
    record = run.headline.record
    if record.versus is None:
        return None, "not recorded"
    sibling = next(
        (
            other
            for other in runs
            if other is not run
            and run.evaluation_id is not None
            and other.evaluation_id == run.evaluation_id
            and other.headline.result.snapshot_version == active
        ),
        None,
    )
    if sibling is None:
        return None, (
            f"the active {active} was not evaluated with it: `memabra ope log --policy snapshot:{version} "
            f"--policy snapshot:{active}` pairs them on the same decisions"
        )
    paired = record.against(sibling.headline.result.policy)
    if paired is not None:
        return renamed(paired, version, active), ""
    if not record.versus:
        return None, "not paired: its estimate is unsupported"
    if sibling.headline.target_supported is not True:
        return None, f"not paired: the active {active}'s estimate in the same evaluation is unsupported"
    return None, "no paired difference recorded"


def _missing(record: RunRecord) -> str:
    """Why a run shows no paired difference with the logging policy."""
    if record.versus is None:
        return "paired difference not recorded (stored before runs kept it)"
    if not record.versus:
        return "not paired: its estimate is unsupported"
    return "no paired difference recorded"


def _from_metrics(version: str, metrics: Mapping[str, Any], active: str | None) -> PromotionCheck:
    supported = metrics.get("supported")
    verdict = str(metrics.get("verdict") or "").removeprefix(_FORCED)
    low, high = _number(metrics.get("improvement_ci_low")), _number(metrics.get("improvement_ci_high"))
    improvement = None
    if low is not None and high is not None:
        improvement = paired_with(version, LOGGING_POLICY, _number(metrics.get("improvement")), low, high)
    return PromotionCheck(
        version,
        paired_logging=improvement,
        logging_note="" if improvement is not None else _metrics_missing(metrics, supported),
        active=active,
        active_note="" if active is None else f"the active {active} was not evaluated with it",
        source="its training metrics",
        estimator=str(metrics.get("estimator") or "estimate"),
        estimate=_number(metrics.get("estimate")),
        ci_low=_number(metrics.get("ci_low")),
        ci_high=_number(metrics.get("ci_high")),
        logging_value=_number(metrics.get("logging_value")),
        supported=supported if isinstance(supported, bool) else None,
        # "unsupported: <why>" is how train --from-log words an unsupported verdict
        reason=verdict.removeprefix("unsupported: ") if supported is False else "",
    )


def _metrics_missing(metrics: Mapping[str, Any], supported: Any) -> str:
    if supported is False:
        return "not paired: its estimate is unsupported"
    if "improvement" in metrics:
        return "no paired difference recorded"
    return "paired difference not recorded in its training metrics"


def _other(paired: Paired) -> str:
    return "the logging policy" if paired.other == LOGGING_POLICY else f"the active {paired.other}"


def _forced_verdict(metrics: Mapping[str, Any]) -> str | None:
    verdict = metrics.get("verdict")
    if isinstance(verdict, str) and verdict.startswith(_FORCED):
        return verdict.removeprefix(_FORCED)
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fixed(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
