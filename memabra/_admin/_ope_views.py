"""The policies page's offline-evaluation rows and chart: what each stored estimate says, whether it
can be trusted, and how it compares with the logging policy (what production earned on the same
decisions).

A run stores one row per estimator of one target (``memabra ope log``); the page shows one line
per run (:class:`OPERun`: its recommended estimate) with every estimate folded under it. Every
row's details carry
the target's verdict (``supported``, ``reason``), the logging policy's value and, on runs stored
since it was recorded, the data window. The recommended row carries the target's verdict; every
other row its own estimator's (``estimator_supported``), which says only that its own weight looked
sound: when the target as a whole is unsupported, such a row is not to be read as an answer, so it
is shown muted and marked, however tight its interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memabra._admin._ope_record import NOT_RECORDED, RunRecord, json_number, json_time, run_record
from memabra._records import OPEResult

__all__ = [
    "DataWindow",
    "OPERow",
    "OPERun",
    "evaluations",
    "ope_chart",
    "ope_rows",
    "ope_runs",
    "ope_target",
    "versus_logging",
]


@dataclass(frozen=True, slots=True)
class DataWindow:
    """The decisions an evaluation read: the range asked for (``None``: unbounded), the first
    and last rewarded decision it found there, and the policies whose decisions alone it read
    (``ope log --logged-by``; empty: every policy's)."""

    since: datetime | None
    until: datetime | None
    first: datetime | None
    last: datetime | None
    logged_by: tuple[str, ...] = ()

    @property
    def restricted(self) -> bool:
        return self.since is not None or self.until is not None or bool(self.logged_by)


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
    # the reward weights the run scored under, in words: runs re-scored under other weights are
    # not comparable, and runs stored before weights were recorded say so
    weights: str = "not recorded"
    # an "as logged" run's recorded scales (``VERSION: ws=1 ...``): a recompute since re-totals the
    # log, and "as logged" alone would then read as today's weights
    scales: tuple[str, ...] = ()
    # what the run kept beside its estimates (paired differences, provenance, ESS): all None on a
    # run stored before they were kept
    record: RunRecord = field(default=NOT_RECORDED)

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
        if not self.recommended:
            return ""
        r = self.result
        return versus_logging(self.supported, r.ci_low, r.ci_high, self.logging_value)


def versus_logging(supported: bool | None, ci_low: float, ci_high: float, logging_value: float | None) -> str:
    """An estimate's interval against the logging policy's value, in words ("" without that value)."""
    if logging_value is None:
        return ""
    if supported is not True:
        return "cannot tell: the target is unsupported"
    if ci_low > logging_value:
        return "better: the whole interval is above the logging policy"
    if ci_high < logging_value:
        return "worse: the whole interval is below the logging policy"
    return "cannot tell: the interval contains the logging policy's value"


@dataclass(frozen=True, slots=True)
class OPERun:
    """One evaluation run: its headline estimate (the recommended one; a run stored before
    recommendations were recorded has none, and shows its first estimate) and every estimate."""

    headline: OPERow
    rows: tuple[OPERow, ...]

    @property
    def run_id(self) -> str:
        return self.headline.result.run_id

    @property
    def created_at(self) -> datetime:
        return max(row.result.created_at for row in self.rows)

    @property
    def evaluation_id(self) -> str | None:
        """The evaluation this run was one target of (``ope log`` with several ``--policy``);
        ``None`` for a run stored before runs recorded it."""
        made = self.headline.record.provenance
        return None if made is None else made.evaluation_id


def ope_runs(rows: Sequence[OPERow]) -> list[OPERun]:
    """The rows grouped by run, newest run first, the runs of one evaluation together (where the
    newest of them falls); in a run, the recommended estimate first, then the others in the order
    the evaluation stored them."""
    by_run: dict[str, list[OPERow]] = {}
    for row in rows:
        by_run.setdefault(row.result.run_id, []).append(row)
    runs = []
    for members in by_run.values():
        members.sort(key=lambda row: (not row.recommended, row.result.created_at))
        runs.append(OPERun(headline=members[0], rows=tuple(members)))
    runs.sort(key=lambda run: run.created_at, reverse=True)
    first_of: dict[str, int] = {}
    for i, run in enumerate(runs):
        first_of.setdefault(run.evaluation_id or run.run_id, i)
    runs.sort(key=lambda run: first_of[run.evaluation_id or run.run_id])  # stable: newest first within
    return runs


def evaluations(runs: Sequence[OPERun]) -> dict[str, tuple[OPERun, ...]]:
    """The runs of each evaluation that stored several (its targets evaluated together, paired
    with each other), by evaluation id."""
    by_id: dict[str, list[OPERun]] = {}
    for run in runs:
        if run.evaluation_id is not None:
            by_id.setdefault(run.evaluation_id, []).append(run)
    return {key: tuple(members) for key, members in by_id.items() if len(members) > 1}


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
        unreached_share=json_number(d.get("unreached_share")),
        logging_value=json_number(d.get("logging_value")),
        window=_window(d.get("window")),
        weights=r.weights_label,
        scales=r.weights_lines[1:],
        record=run_record(r, ope_target(r)),
    )


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _window(value: Any) -> DataWindow | None:
    if not isinstance(value, Mapping):
        return None  # stored before runs recorded their window
    return DataWindow(
        since=json_time(value.get("since")),
        until=json_time(value.get("until")),
        first=json_time(value.get("first_decision_at")),
        last=json_time(value.get("last_decision_at")),
        logged_by=tuple(str(p) for p in logged_by) if isinstance(logged_by := value.get("logged_by"), list) else (),
    )


def ope_chart(rows: Sequence[OPERow], reward_range: tuple[float, float]) -> dict[str, Any]:
    """The OPE chart's data: one bar (interval) and one point per estimate, oldest run first, with
    which estimates are unsupported or recommended and the logging policy's value per run.

    The y axis spans the data, but never past ``reward_range`` (what the composite reward can
    take): one wild estimate (a pseudo-inverse at +9 with an interval to +18) would otherwise
    flatten every other interval. An interval that runs past the axis is drawn to its edge and
    flagged in ``clipped_low`` / ``clipped_high``."""
    ordered = sorted(rows, key=lambda row: (row.result.created_at, row.target, row.result.estimator))
    axis_min, axis_max = _axis(ordered, reward_range)
    intervals = [(row.result.ci_low, row.result.ci_high) for row in ordered]
    return {
        "labels": [f"{row.target} · {row.result.estimator}" for row in ordered],
        "value": [row.result.value for row in ordered],
        "interval": [[max(low, axis_min), min(high, axis_max)] for low, high in intervals],
        # None: a run stored before verdicts were recorded, drawn plainly rather than as untrusted
        "trusted": [
            row.trustworthy if row.supported is not None or row.target_unsupported else None for row in ordered
        ],
        "recommended": [row.recommended for row in ordered],
        "logging_value": [row.logging_value for row in ordered],
        "axis": [axis_min, axis_max],
        "clipped_low": [low < axis_min for low, _ in intervals],
        "clipped_high": [high > axis_max for _, high in intervals],
        "note": [_chart_note(row, axis_min, axis_max) for row in ordered],
    }


# Room left above and below the data, as a share of its span, so a bar's end is not the frame.
_AXIS_MARGIN = 0.04


def _axis(rows: Sequence[OPERow], reward_range: tuple[float, float]) -> tuple[float, float]:
    low, high = reward_range
    values = [v for row in rows for v in (row.result.ci_low, row.result.ci_high, row.result.value, row.logging_value)]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    data_low, data_high = max(low, min(finite, default=low)), min(high, max(finite, default=high))
    if data_low >= data_high:  # every value beyond one end of the range, or a single value
        data_low, data_high = (low, high) if data_low > data_high else (data_low - 0.5, data_high + 0.5)
    margin = (data_high - data_low) * _AXIS_MARGIN
    return round(data_low - margin, 6), round(data_high + margin, 6)


def _chart_note(row: OPERow, axis_min: float, axis_max: float) -> str:
    note = _note(row)
    r = row.result
    if r.ci_low < axis_min or r.ci_high > axis_max:
        clipped = f"interval [{r.ci_low:.3f}, {r.ci_high:.3f}] runs past the axis (cut at the reward's range)"
        note = f"{note} · {clipped}" if note else clipped
    return note


def _note(row: OPERow) -> str:
    if row.recommended:
        return "recommended" + ("" if row.supported else " · target unsupported")
    if row.target_unsupported:
        return "target unsupported: not an answer"
    if row.supported is False:
        return "unsupported"
    return ""
