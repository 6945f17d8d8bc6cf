"""The learners made in this process, so that one standing by can say when the learner holding its
lease is in this very process: an agent built earlier and not closed (a notebook cell run again),
which keeps the newer agent from learning for as long as it lives. Another process holding the
lease is the design (``memabra status`` names the holder); this case surprises."""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memabra._learner import Learner
    from memabra.storage import LearnerLease

__all__ = ["register", "warn_if_held_here"]

logger = logging.getLogger("memabra")

# each learner's lease: the one a standby failed to take is compared with the held ones. Weak on
# both sides: a lease held here strongly would keep its engine, and through it the learner (a key
# its value reaches never leaves a WeakKeyDictionary), alive after its agent was closed and dropped
_LEARNERS: weakref.WeakKeyDictionary[Learner, weakref.ref[LearnerLease]] = weakref.WeakKeyDictionary()


def register(learner: Learner, lease: LearnerLease) -> None:
    _LEARNERS[learner] = weakref.ref(lease)


def warn_if_held_here(learner: Learner) -> bool:
    """Log one WARNING when another live learner of this process holds ``learner``'s lease (same
    log, same policy); ``True`` when it did."""
    mine = _LEARNERS.get(learner)
    lease = mine() if mine is not None else None
    if learner.log.closed or lease is None:
        return False
    for other, held_ref in list(_LEARNERS.items()):
        held = held_ref()
        if (
            other is not learner
            and held is not None
            and other.policy == learner.policy
            and held.keeps_out(lease)
            and not other.log.closed
            and other.log.url == learner.log.url
        ):
            logger.warning(
                "policy %s on %s is learned by another agent of this process, built earlier and not closed "
                "(a notebook cell run again?): this one serves what that one commits and learns nothing "
                "itself until that one is closed (agent.close(), or build agents in `with` blocks)",
                learner.policy,
                learner.log.url,
            )
            return True
    return False
