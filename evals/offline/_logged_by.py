"""Reading the decisions some policies logged, and saying why a read found nothing to evaluate.

Several bots (each routing with its own router class, so each with its own policy name) can share
one episode log. ``logged_by`` restricts offline evaluation and training to the decisions those
policies logged (the decision's ``policy``), so one bot's logging-policy value and estimates are
not mixed with another's traffic. The filter runs in the query: another policy's decisions are
never assembled. A name no decision was logged by is refused before anything is read, naming the
policies that did log decisions: a typo must not read as an evaluation of nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from memabra._errors import ConfigError, InvalidRecordError
from memabra._records import LoggedDecision
from memabra.storage import EpisodeLog
from memabra.storage._offline import (
    DECISION_CHUNK,
    count_rewarded,
    iter_decisions,
    logged_policies,
    unlogged_policies,
)

__all__ = ["described", "nothing_read", "read_decisions", "refuse_unlogged", "rewarded_count"]


def described(logged_by: frozenset[str] | None) -> str:
    """`` logged by a, b`` for messages, empty without a filter."""
    return "" if logged_by is None else f" logged by {', '.join(sorted(logged_by))}"


def refuse_unlogged(log: EpisodeLog, logged_by: frozenset[str] | None) -> None:
    """Raise :class:`~memabra.ConfigError` (one line) for a policy in ``logged_by`` that logged no
    decision, naming the policies that did."""
    if logged_by is None:
        return
    missing = unlogged_policies(log.transactions, logged_by)
    if not missing:
        return
    logged = logged_policies(log.transactions)  # only on a miss: the message names them
    which = "policy" if len(missing) == 1 else "policies"
    there = f"the policies that logged decisions are: {', '.join(logged)}" if logged else "the log holds no decisions"
    raise ConfigError(f"logged_by: no decision in the log was logged by {which} {', '.join(missing)}; {there}")


def read_decisions(
    log: EpisodeLog, since: datetime | None, until: datetime | None, logged_by: frozenset[str] | None
) -> Iterator[LoggedDecision]:
    """The log's decisions in ``[since, until)`` in time order; only ``logged_by``'s when given."""
    if logged_by is None:
        return log.iter_decisions(since=since, until=until)
    return iter_decisions(log.transactions, since, until, DECISION_CHUNK, logged_by=logged_by)


def rewarded_count(
    log: EpisodeLog, since: datetime | None, include_provisional: bool, logged_by: frozenset[str] | None
) -> int:
    """How many decisions since ``since`` have a final reward (any, with ``include_provisional``),
    only ``logged_by``'s when given: one SQL count."""
    return count_rewarded(log.transactions, since, include_provisional, logged_by)


def nothing_read(
    log: EpisodeLog,
    since: datetime | None,
    until: datetime | None,
    include_provisional: bool,
    provisional: int,
    only: frozenset[str] | None,
    logged_by: frozenset[str] | None,
) -> InvalidRecordError:
    """The error of an evaluation that read no rewarded decision: what each filter left, and how to
    read the decisions it left out."""
    left_out = (
        f" ({provisional} {'decision has' if provisional == 1 else 'decisions have'} a provisional reward "
        "only: pass include_provisional=True, or --include-provisional, to evaluate them)"
        if provisional
        else ""
    )
    named = (
        f" among the {len(only)} decision ids given (check that they are decision ids, not episode ids"
        + (f", and of decisions{described(logged_by)})" if logged_by is not None else ")")
        if only is not None
        else ""
    )
    outside = ""
    if since is not None or until is not None:
        window = f"[{since.isoformat() if since else 'the first decision'}, {until.isoformat() if until else 'now'})"
        total = rewarded_count(log, None, include_provisional, logged_by)
        outside = f" (the window since/until {window} is empty; {total} rewarded decisions lie outside it)"
    return InvalidRecordError(
        f"reward: the episode log holds no rewarded decisions{described(logged_by)} in the chosen range{named}: "
        "nothing to evaluate" + left_out + outside
    )
