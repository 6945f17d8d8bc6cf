"""Failed turns in the episode listing: which episodes were logged as failed, and why.

A turn that ended in an exception, or that a new message on its thread superseded, is logged with
``accepted: false`` feedback from :data:`FAILED_TURN_SOURCE` whose ``comment`` starts with a
stable cause word (``model_error (MODEL): Type: ...``, ``superseded: ...``; see
``memabra._graph_steps.failure_reason``). The listing filters on that feedback in SQL (an
``EXISTS`` per episode, through the feedback table's index on ``episode_id``) and reads the cause
of the few episodes on a page back in one short query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from memabra._errors import InvalidRecordError
from memabra.storage._models import EpisodeRow, FeedbackRow

__all__ = ["FAILED_TURN_SOURCE", "FAILURE_CAUSES", "failed_condition", "failure_cause", "failure_causes"]

FAILED_TURN_SOURCE = "memabra.failed_turn"
"""The feedback source of the ``accepted: false`` a failed turn is logged with (the runtime's
``memabra._paused_turns.FAILED_TURN_SOURCE``; storage sits below the runtime, so it is named here
too, and a test holds the two equal)."""

FAILURE_CAUSES = ("recursion_limit", "model_error", "tool_error", "superseded")
"""The cause words a failed turn's comment starts with: the run ran out of its ``recursion_limit``;
a model call or a tool call raised (the step's name follows in parentheses); a new message on the
thread superseded the turn before it finished (a user pressing stop and asking again)."""

# What follows the cause word in a comment: ": " (recursion_limit, superseded) or " (" and the
# step's name (model_error, tool_error). A word merely starting with a cause is no cause.
_AFTER_CAUSE = (":", " ")


def check_cause(cause: str) -> str:
    """``cause`` if it is one of :data:`FAILURE_CAUSES`, else an error naming them."""
    if cause not in FAILURE_CAUSES:
        raise InvalidRecordError(f"failure_cause must be one of {', '.join(FAILURE_CAUSES)}, got {cause!r}")
    return cause


def failed_condition(failed: bool | None, cause: str | None) -> Any | None:
    """The WHERE condition of the failure filter (``None``: no condition). A cause implies
    ``failed``; asking for not-failed episodes of a cause is a contradiction, refused."""
    if cause is not None:
        check_cause(cause)
        if failed is False:
            raise InvalidRecordError("failure_cause names why a turn failed: it cannot be given with failed=False")
    if failed is None and cause is None:
        return None
    f = FeedbackRow
    where = [f.episode_id == EpisodeRow.id, f.source == FAILED_TURN_SOURCE]
    if cause is not None:
        # substr, not LIKE: "_" in the cause words is LIKE's wildcard, and SQLite's LIKE ignores case
        comment = func.substr(f.payload["comment"].as_string(), 1, len(cause) + 1)
        where.append(comment.in_([cause + after for after in _AFTER_CAUSE]))
    found = exists().where(*where)
    return ~found if failed is False else found


def failure_cause(comment: object) -> str | None:
    """The cause word a failed turn's ``comment`` starts with, as :func:`failed_condition` reads
    it; ``None`` for a comment that names none (a turn failed with no step to blame)."""
    if not isinstance(comment, str):
        return None
    return next((c for c in FAILURE_CAUSES if any(comment.startswith(c + a) for a in _AFTER_CAUSE)), None)


def failure_causes(s: Session, episode_ids: Sequence[str]) -> Mapping[str, str | None]:
    """Of ``episode_ids``, those logged as failed turns, each with its cause (``None``: unnamed).
    An episode with several such feedback rows (never written by the runtime) reads its first."""
    if not episode_ids:
        return {}
    f = FeedbackRow
    rows = s.execute(
        select(f.episode_id, f.payload)
        .where(f.episode_id.in_(episode_ids), f.source == FAILED_TURN_SOURCE)
        .order_by(f.received_at, f.id)
    )
    found: dict[str, str | None] = {}
    for episode_id, payload in rows:
        if episode_id not in found:
            found[episode_id] = failure_cause(payload.get("comment") if isinstance(payload, dict) else None)
    return found
