"""What offline evaluation says about promoting a snapshot, shown next to its Promote button and
in the confirmation: its latest recommended estimate against the logging policy, whether the log
supports that estimate, and whether ``memabra train --from-log --force`` saved it against its
verdict. Promoting is never refused here (an operator may know better), but an unsupported,
forced or unevaluated snapshot is said to be one before anything changes.

The estimate comes from the snapshot's latest stored evaluation run with a recommended estimate,
else from the metrics ``train --from-log`` stored with it (``verdict``, ``estimator``,
``supported``, ``estimate``, ``ci_low``, ``ci_high``, ``logging_value``), else from its latest run
of any kind (stored before runs recorded a recommendation). "Forced" is read from the metrics'
``verdict`` (``forced: ...``) whichever source gave the estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

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


def promotion_check(version: str, metrics: Mapping[str, Any], runs: Sequence[OPERun]) -> PromotionCheck:
    """What the page says about promoting ``version`` (``runs``: stored runs, newest first)."""
    check = _estimate(version, metrics, runs)
    forced_verdict = _forced_verdict(metrics)
    if forced_verdict is None:
        return check
    return replace(check, forced=True, forced_verdict=forced_verdict)


def _estimate(version: str, metrics: Mapping[str, Any], runs: Sequence[OPERun]) -> PromotionCheck:
    own = [run for run in runs if run.headline.result.snapshot_version == version]
    recommended = next((run for run in own if run.headline.recommended), None)
    if recommended is not None:
        return _from_run(version, recommended)
    if isinstance(metrics.get("estimate"), (int, float)):
        return _from_metrics(version, metrics)
    if own:
        return _from_run(version, own[0])
    return PromotionCheck(version, "")


def _from_run(version: str, run: OPERun) -> PromotionCheck:
    row = run.headline
    r = row.result
    kind = "" if row.recommended else ", no recommended estimate recorded"
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
    )


def _from_metrics(version: str, metrics: Mapping[str, Any]) -> PromotionCheck:
    supported = metrics.get("supported")
    verdict = str(metrics.get("verdict") or "").removeprefix(_FORCED)
    return PromotionCheck(
        version,
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


def _forced_verdict(metrics: Mapping[str, Any]) -> str | None:
    verdict = metrics.get("verdict")
    if isinstance(verdict, str) and verdict.startswith(_FORCED):
        return verdict.removeprefix(_FORCED)
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fixed(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
