"""The policies page's offline-evaluation rows and chart: what each stored estimate says, whether it
can be trusted, and how it compares with the logging policy (what production earned on the same
decisions).

A run stores one row per estimator of one target (``memabra ope log``); every row's details carry
the target's verdict (``supported``, ``reason``), the logging policy's value and, on runs stored
since it was recorded, the data window. The recommended row carries the target's verdict; every
other row its own estimator's (``estimator_supported``), which says only that its own weight looked
sound: when the target as a whole is unsupported, such a row is not to be read as an answer, so it
is shown muted and marked, however tight its interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memabra._records import OPEResult

__all__ = ["DataWindow", "OPERow", "ope_chart", "ope_rows", "ope_target"]


@dataclass(frozen=True, slots=True)
class DataWindow:
    """The decisions an evaluation read: the range asked for (``None``: unbounded) and the first
    and last rewarded decision it found there."""

    since: datetime | None
    until: datetime | None
    first: datetime | None
    last: datetime | None

    @property
    def restricted(self) -> bool:
        return self.since is not None or self.until is not None


@dataclass(frozen=True, slots=True)
class OPERow:
    """One stored estimate as the policies page shows it."""

    result: OPEResult
    target: str
    recommended: bool
    # this row's verdict: the target's on the recommended row, else its own estimator's
    supported: bool | None
    reason: str
    target_supported: bool | None
    target_reason: str
    unreached_share: float | None
    logging_value: float | None
    window: DataWindow | None

    @property
    def target_unsupported(self) -> bool:
        return self.target_supported is False

    @property
    def trustworthy(self) -> bool:
        """Whether the estimate may be read as the target's value: its own verdict is supported and
        (on a non-recommended row) so is the target's."""
        return self.supported is True and (self.recommended or not self.target_unsupported)

    @property
    def muted(self) -> bool:
        return not self.recommended and self.target_unsupported

    @property
    def versus_logging(self) -> str:
        """The recommended estimate against the logging policy's value, in words ("" elsewhere)."""
        if not self.recommended or self.logging_value is None:
            return ""
        if self.supported is not True:
            return "cannot tell: the target is unsupported"
        r = self.result
        if r.ci_low > self.logging_value:
            return "better: the whole interval is above the logging policy"
        if r.ci_high < self.logging_value:
            return "worse: the whole interval is below the logging policy"
        return "cannot tell: the interval contains the logging policy's value"


def ope_target(result: OPEResult) -> str:
    """What an evaluation run evaluated: its snapshot, else the policy specification."""
    return result.snapshot_version or result.policy


def ope_rows(results: Sequence[OPEResult]) -> list[OPERow]:
    return [_row(r) for r in results]


def _row(r: OPEResult) -> OPERow:
    d = r.details
    recommended = d.get("recommended") is True
    target_supported = _flag(d.get("supported"))
    target_reason = str(d.get("reason") or "")
    if recommended:
        supported, reason = target_supported, target_reason
    else:
        # runs stored before per-estimator verdicts have none: "–" rather than the target's
        supported, reason = _flag(d.get("estimator_supported")), str(d.get("estimator_reason") or "")
    return OPERow(
        result=r,
        target=ope_target(r),
        recommended=recommended,
        supported=supported,
        reason=reason,
        target_supported=target_supported,
        target_reason=target_reason,
        unreached_share=_number(d.get("unreached_share")),
        logging_value=_number(d.get("logging_value")),
        window=_window(d.get("window")),
    )


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _window(value: Any) -> DataWindow | None:
    if not isinstance(value, Mapping):
        return None  # stored before runs recorded their window
    return DataWindow(
        since=_time(value.get("since")),
        until=_time(value.get("until")),
        first=_time(value.get("first_decision_at")),
        last=_time(value.get("last_decision_at")),
    )


def ope_chart(rows: Sequence[OPERow]) -> dict[str, Any]:
    """The OPE chart's data: one bar (interval) and one point per estimate, oldest run first, with
    which estimates are unsupported or recommended and the logging policy's value per run."""
    ordered = sorted(rows, key=lambda row: (row.result.created_at, row.target, row.result.estimator))
    return {
        "labels": [f"{row.target} · {row.result.estimator}" for row in ordered],
        "value": [row.result.value for row in ordered],
        "interval": [[row.result.ci_low, row.result.ci_high] for row in ordered],
        # None: a run stored before verdicts were recorded, drawn plainly rather than as untrusted
        "trusted": [
            row.trustworthy if row.supported is not None or row.target_unsupported else None for row in ordered
        ],
        "recommended": [row.recommended for row in ordered],
        "logging_value": [row.logging_value for row in ordered],
        "note": [_note(row) for row in ordered],
    }


def _note(row: OPERow) -> str:
    if row.recommended:
        return "recommended" + ("" if row.supported else " · target unsupported")
    if row.target_unsupported:
        return "target unsupported: not an answer"
    if row.supported is False:
        return "unsupported"
    return ""
