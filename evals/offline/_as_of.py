"""Reading a live log twice and seeing the same decisions both times.

``evaluate_policies`` reads the log twice (the reward model and the additivity check first, the
estimates second) and keeps nothing per decision between the passes. On a log that serving
processes keep writing, the second pass would otherwise see more: decisions logged since, and
rewards finalised since (a feedback window closes every few minutes). A decision that appears only
in the second pass shifts every later decision's position, and with it the cross-fitting fold the
reward model assigned by position, so the model would predict rewards it was fitted on.

So both passes read the log *as of* the moment the evaluation began: decisions made before it,
with rewards last computed before it (finalising recomputes a reward, so one finalised since reads
as not yet there, in both passes alike). What can still differ (an episode deleted meanwhile, or
one committed seconds after it was made) is caught by a count and checksum of the decision ids each
pass read, and reported as :class:`~memabra._errors.LogChangedError`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from memabra._errors import LogChangedError
from memabra._records import LoggedDecision, OPEResult

__all__ = ["ReadFingerprint", "changed_since", "pinned_until", "with_window"]


def pinned_until(until: datetime | None, as_of: datetime) -> datetime:
    """The end of the window actually read: ``until``, or the evaluation's start if earlier."""
    return as_of if until is None or until > as_of else until


def changed_since(decision: LoggedDecision, as_of: datetime) -> bool:
    """Whether the decision's reward was (re)computed after ``as_of``: not there yet, as of then."""
    return decision.reward_at is not None and decision.reward_at > as_of


@dataclass
class ReadFingerprint:
    """How many decisions a pass read, and an order-sensitive checksum of their ids."""

    count: int = 0
    checksum: int = 0

    def add(self, decision_id: str) -> None:
        self.count += 1
        self.checksum = zlib.crc32(decision_id.encode("utf-8"), self.checksum)

    def check_same(self, first: ReadFingerprint) -> None:
        """Raise :class:`LogChangedError` unless this pass read what ``first`` read."""
        if self.count != first.count or self.checksum != first.checksum:
            raise LogChangedError(
                f"the episode log changed while it was evaluated: the first pass read {first.count} rewarded "
                f"decisions and the second {self.count} (episodes were deleted, or committed late, meanwhile); "
                "evaluate again"
            )


def with_window(
    results: Sequence[OPEResult],
    since: datetime | None,
    until: datetime | None,
    as_of: datetime,
    first_at: datetime | None,
    last_at: datetime | None,
    only: frozenset[str] | None,
    logged_by: frozenset[str] | None = None,
) -> tuple[OPEResult, ...]:
    """The stored rows with the data they were computed on: the range asked for (``None``:
    unbounded), the moment the log was read as of, the first and last decision read, and the
    policies whose decisions alone were read (``logged_by``), so a run restricted with ``until`` or
    to one bot's decisions does not read like one on the whole log (the number of decisions is each
    row's ``n_rounds``)."""
    window: dict[str, str | int | list[str] | None] = {
        "since": since.isoformat() if since is not None else None,
        "until": until.isoformat() if until is not None else None,
        "as_of": as_of.isoformat(),
        "first_decision_at": first_at.isoformat() if first_at is not None else None,
        "last_decision_at": last_at.isoformat() if last_at is not None else None,
    }
    if only is not None:  # a run on named decisions must not read like one on every decision of the range
        window["decision_ids_given"] = len(only)
    if logged_by is not None:
        window["logged_by"] = sorted(logged_by)
    return tuple(replace(r, details={**r.details, "window": window}) for r in results)
