"""Where a policy's learner starts when it takes the lease: its last commit (the checkpoint's
snapshot and read position), else the base it was given (a trained router stored in the log), else
a fresh router. Split from :mod:`memabra._learner`, whose :meth:`~memabra._learner.Learner.acquire`
resumes from what :func:`learner_start` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memabra._errors import ConfigError
from memabra._records import PolicySnapshot
from memabra._replay import learner_meta
from memabra.router import Router, Similarity, load_router
from memabra.router._persistence import learns_features_of
from memabra.storage import START, EpisodeLog, LearnerStore, ReadPosition

__all__ = ["LearnerStart", "learner_start"]


@dataclass(frozen=True, slots=True)
class LearnerStart:
    """What a learner resumes from (the router is the learner's own from then on)."""

    router: Router
    root: str
    """Its versions are ``<root>+<rewards learned>`` across restarts."""
    base: str | None
    """The stored base its lineage started from (``None``: scratch)."""
    position: ReadPosition
    learned: int
    last_snapshot: str | None
    """The checkpoint's snapshot (``None``: nothing committed in this lineage yet)."""
    local_credit: bool


def learner_start(
    log: EpisodeLog,
    store: LearnerStore,
    policy: str,
    *,
    make_router: Callable[[], Router],
    base: Callable[[], PolicySnapshot | None] | None,
    similarity: Similarity,
    local_credit: bool,
    encoder: str | None = None,
) -> LearnerStart:
    """Read the checkpoint of ``policy`` and restore what it names, or start from ``base`` (when it
    returns a snapshot) or ``make_router()`` when it names none. ``encoder``: the key of the encoder
    the serving processes log features with, which the router's snapshots then record (else the
    one its start recorded, unless its similarity has an encoder of its own)."""
    start = _start(
        log, store, policy, make_router=make_router, base=base, similarity=similarity, local_credit=local_credit
    )
    if encoder is not None:
        learns_features_of(start.router, encoder)
    return start


def _start(
    log: EpisodeLog,
    store: LearnerStore,
    policy: str,
    *,
    make_router: Callable[[], Router],
    base: Callable[[], PolicySnapshot | None] | None,
    similarity: Similarity,
    local_credit: bool,
) -> LearnerStart:
    checkpoint = store.checkpoint(policy)
    if checkpoint is None or checkpoint.snapshot_version is None:
        start = base() if base is not None else None
        router = (
            load_router(start, similarity=similarity, classes=_classes(make_router))
            if start is not None
            else make_router()
        )
        if router.name != policy:
            raise ConfigError(f"the learner of policy {policy!r} was given a {router.name!r} router")
        return LearnerStart(
            router=router,
            root=router.policy_version,
            base=start.version if start is not None else None,
            position=START,
            learned=0,
            last_snapshot=None,
            local_credit=local_credit,
        )
    snapshot = log.get_snapshot(checkpoint.snapshot_version)
    router = load_router(snapshot, similarity=similarity, classes=_classes(make_router))
    meta = learner_meta(snapshot)
    stored_base = meta.get("base")
    return LearnerStart(
        router=router,
        base=str(stored_base) if stored_base else None,
        # Versions stay "<root>+<rewards learned>" across restarts instead of growing a suffix each time.
        root=str(meta.get("root", snapshot.version)),
        local_credit=bool(meta.get("local_credit", local_credit)),
        position=checkpoint.position,
        learned=checkpoint.learned,
        last_snapshot=snapshot.version,
    )


def _classes(make_router: Callable[[], Router]) -> tuple[type[Router], ...]:
    """The class ``make_router`` builds: a router of your own restores from its snapshots."""
    return (type(make_router()),)
