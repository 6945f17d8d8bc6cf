"""Decisions written to an episode log in the order they were made.

Offline evaluation reads a log in time order, ``(created_at, id)``, and that order is more than
cosmetic: the reward model's cross-fitting folds and a stochastic target's seeded draws follow
each decision's position in it. A decision's id is a random UUID, so two decisions with one
``created_at`` (a clock that ticks every 15.6 ms, as Windows' does for Python before 3.13, or
decisions faster than a microsecond) would be read back in an order that changes from run to run,
and so would the estimates; a clock stepped back during a run (NTP) would read decisions back out
of the order they were made in. :class:`DecisionClock` keeps each written decision's time strictly
after the previous one's (by a microsecond where the clock did not move forward), so the log's time
order is the order the run made them in.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from memabra._records import Selection

__all__ = ["DecisionClock"]

_TICK = timedelta(microseconds=1)  # the finest time both SQLite and PostgreSQL keep


class DecisionClock:
    """Hands back each selection as it should be logged: with its own ``created_at`` where that is
    after the previous one's, else one microsecond after it."""

    def __init__(self) -> None:
        self._last: datetime | None = None

    def __call__(self, selection: Selection) -> Selection:
        at = selection.created_at
        if self._last is not None and at <= self._last:
            at = self._last + _TICK
            selection = replace(selection, created_at=at)
        self._last = at
        return selection
