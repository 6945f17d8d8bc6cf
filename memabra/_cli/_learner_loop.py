"""How ``memabra learner`` runs until stopped: it stands by while another learner holds the lease,
takes over when it is free, and rides out a database outage (one line, back-off, a resume from the
last commit); ``--once`` ends at the first outage, with one line and exit 1.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rich.markup import escape
from rich.text import Text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from memabra._cli._common import console, err_console, error_line, fail
from memabra._errors import StorageContentionError
from memabra._learner import Learner
from memabra._records import PolicySnapshot
from memabra.storage import LearnerStore

__all__ = ["learn_until_stopped", "learner_json", "lease_holder"]

logger = logging.getLogger("memabra")


def lease_holder(store: LearnerStore, policy: str) -> str:
    """Who holds the policy's learner lease, in words, for a line saying why this learner waits."""
    holder = store.lease_holder(policy)
    return holder.describe() if holder is not None else "another learner (released a moment ago)"


def learner_json(
    loop: Learner, committed: PolicySnapshot | None, *, lease_held_by: str | None = None
) -> dict[str, Any]:
    """What ``memabra learner --json`` writes when it stops: the rewards this run committed
    (``learned``), the lineage's count, earlier runs included, the read position (null: the start
    of the log), the last snapshot this run committed (null: none), and who held the lease when
    ``--once`` gave up waiting for it (then nothing else is known: nulls)."""
    if lease_held_by is not None:
        return {
            "policy": loop.policy,
            "learned": 0,
            "lineage_learned": None,
            "position": None,
            "snapshot": None,
            "lease_held_by": lease_held_by,
        }
    position = loop.position
    return {
        "policy": loop.policy,
        "learned": loop.committed_here,
        "lineage_learned": loop.learned,
        "position": {"seq": position.seq, "episode_id": position.episode_id} if position.seq >= 0 else None,
        "snapshot": {"version": committed.version, "status": committed.status} if committed is not None else None,
        "lease_held_by": None,
    }


def learn_until_stopped(loop: Learner, store: LearnerStore, policy: str, *, once: bool, poll: float) -> int:
    """The learner's loop (a step, a sleep when nothing is left to learn), counting the rewards this
    process learned (``loop.learned`` counts the lineage, earlier runs included). Stops on Ctrl-C (or SIGTERM) with what the interrupted step learned
    counted too; says once when it stands by for a lease held elsewhere, and when it takes over.
    A database outage (connection refused or lost, a failover) ends ``--once`` with one line and
    exit 1; the long-running learner drops what it learned since its last commit (and the lease),
    says why in one line, and tries again with back-off, resuming from its last commit."""
    learned = 0
    backoff = 0.0
    last_outage = -float("inf")
    while True:
        try:
            return learned + _learn_steps(loop, store, policy, once=once, poll=poll)
        except _Outage as outage:
            learned += outage.kept
            _drop_after_outage(loop)
            if once:
                fail(f"the learner of policy {policy!r} cannot use the database: {outage.reason}")
            if time.monotonic() - last_outage > 2 * _MAX_BACKOFF_S:
                backoff = 0.0  # a new outage, not the same one going on: start again from 1 s
            backoff = min(_MAX_BACKOFF_S, max(poll, backoff * 2, 1.0))
            last_outage = time.monotonic()
            err_console.print(
                Text(
                    f"the learner of policy {policy} cannot use the database ({outage.reason}); retrying in "
                    f"{backoff:g} s from its last commit (what it learned since is learned again, nothing twice)"
                ),
                highlight=False,
            )
            try:
                time.sleep(backoff)
            except KeyboardInterrupt:
                return learned


_MAX_BACKOFF_S = 30.0
"""The longest wait between tries while the database is unreachable."""


class _Outage(Exception):
    """The database went away during a run; ``kept``: what this try learned and committed."""

    def __init__(self, reason: str, kept: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kept = kept


def _outage_reason(exc: BaseException) -> str | None:
    """One line naming a lost or refused database connection; ``None`` for any other error."""
    if isinstance(exc, StorageContentionError):
        return str(exc)
    if isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        return error_line(exc)
    return None


def _drop_after_outage(loop: Learner) -> None:
    """Forget the uncommitted model and the lease: the next lease holder (this process once the
    database is back) resumes from the last commit, so a commit that reached the database just
    before the connection broke is neither lost nor learned twice (the next commit is fenced)."""
    try:
        loop.abandon()
    except Exception:  # the lease's own connection is gone too: the server has released it
        logger.debug("releasing the learner lease after an outage failed", exc_info=True)


def _learn_steps(loop: Learner, store: LearnerStore, policy: str, *, once: bool, poll: float) -> int:
    learned = 0
    standing_by = False
    announced = once  # a --once run says what it did in its last line only
    mark: int | None = None
    try:
        while True:
            held = loop.holds_lease
            if not loop.acquire():
                if not standing_by:
                    # a lease this process held was lost (its connection broke): a holder lookup
                    # now would name nobody, or guess while the database is unreachable
                    console.print(
                        f"standing by: this learner lost the lease of policy {escape(policy)}; taking it again when it can"
                        if held
                        else f"standing by: the learner lease of policy {escape(policy)} is held by "
                        f"{escape(lease_holder(store, policy))}; taking over when it is released or lapses"
                    )
                    standing_by = True
                time.sleep(poll)
                continue
            if standing_by:
                console.print(f"took over the learner lease of policy {escape(policy)}")
                standing_by = False
            elif not announced:
                # a supervisor's log shows the learner working, not only an exit line hours later
                console.print(f"learning policy {escape(policy)}: this learner holds its lease")
            announced = True
            mark = loop.learned
            status = loop.step()
            mark = None
            learned += status.learned
            if once and status.holds_lease and status.learned == 0:
                loop.commit(force=True)
                return learned
            if status.learned == 0 or not status.holds_lease:
                time.sleep(poll)
    except KeyboardInterrupt:
        if mark is not None and loop.holds_lease:
            learned += loop.learned - mark
        return learned
    except Exception as exc:
        reason = _outage_reason(exc)
        if reason is None:
            raise
        in_step = loop.learned - mark if mark is not None else 0
        raise _Outage(reason, max(0, learned + in_step - loop.pending)) from exc
