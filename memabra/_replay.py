"""Where a policy's learner starts and how its model is reproduced: fresh routers, the one way a
final reward is taught (shared by the learner and the replay), and :func:`replay`, which rebuilds the
learner's model from the log alone: from the base it recorded (a trained router an agent was given,
stored in the log) or from scratch, then every final reward in commit order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memabra._errors import ConfigError
from memabra._records import LearningItem, PolicySnapshot
from memabra.router import Router, Similarity, load_router
from memabra.storage import START, EpisodeLog, LearnerStore, ReadPosition

__all__ = [
    "DEFAULT_POLICY",
    "LEARNER_SIMILARITY",
    "META_KEY",
    "READ_BATCH",
    "Recorded",
    "fresh_router",
    "iter_final",
    "learn_item",
    "learner_meta",
    "recorded",
    "replay",
]

# the numpy learner: slate and stop features VW lacks (measured in docs/router.md); "vw" by name
DEFAULT_POLICY = "linear"
# Rewards read per query: large enough to amortise the round trips, small enough to commit often.
READ_BATCH = 500
# The learner learns from logged features and never featurises: BM25 alone spares it loading the
# embedding model (seconds at start-up, which a restarted learner should not wait for).
LEARNER_SIMILARITY = Similarity(encoder=None)
# The snapshot metrics key under which the learner records how its model was made.
META_KEY = "learner"


def fresh_router(
    policy: str,
    learner_args: dict[str, Any] | None = None,
    *,
    similarity: Similarity | None = None,
    classes: Iterable[type[Router]] = (),
) -> Router:
    """A router of ``policy`` with ``learner_args`` (its defaults when ``None``), never trained;
    ``classes`` are routers of your own, found by their ``name`` before the built-in ones."""
    from memabra.router._watcher import router_classes

    known = router_classes(classes)
    cls = known.get(policy)
    if cls is None:
        raise ConfigError(
            f"unknown policy {policy!r}; known: {', '.join(sorted(known))}; a router of your own is named by "
            "its class, --policy module:Class (or classes=[MyRouter] from Python)"
        )
    return cls(**(learner_args or {}), similarity=similarity if similarity is not None else LEARNER_SIMILARITY)


def learn_item(router: Router, item: LearningItem, *, local_credit: bool) -> int:
    """Teach ``router`` one final reward with each selection's logged propensities; returns how
    many selections it learned from. The learner and the replay share this, so they cannot drift."""
    for selection in item.selections:
        chosen = set(selection.chosen_ids)
        outcomes = {cid: value for cid, value in item.outcomes.items() if cid in chosen}
        missing = tuple(cid for cid in item.missing if cid not in chosen)
        router.learn_logged(selection, item.reward, outcomes, local_credit=local_credit, missing=missing)
    return len(item.selections)


def iter_final(store: LearnerStore, after: ReadPosition = START) -> Iterator[tuple[ReadPosition, LearningItem]]:
    position = after
    while True:
        batch = store.read_final(position, limit=READ_BATCH)
        if not batch:
            return
        for final in batch:
            yield final.position, final.item
        position = batch[-1].position


def replay(
    log: EpisodeLog,
    policy: str = DEFAULT_POLICY,
    *,
    learner_args: dict[str, Any] | None = None,
    local_credit: bool | None = None,
    classes: Iterable[type[Router]] = (),
) -> tuple[Router, int]:
    """The router the policy's learner started from, taught every final reward of the log in commit
    order; returns it and the number of rewards. The start is the base the learner recorded in its
    checkpoint (the trained router an agent was given), else a fresh router; ``learner_args``
    (a fresh router with them) and ``local_credit`` default to what the learner recorded (else the
    policy's defaults and ``False``); ``classes``: routers of your own, by their ``name``."""
    store = LearnerStore(log.engine)
    made = recorded(log, policy)
    credit = local_credit if local_credit is not None else made.local_credit
    if learner_args is None and made.base is not None:
        router = load_router(log.get_snapshot(made.base), similarity=LEARNER_SIMILARITY, classes=classes)
    else:
        args = learner_args if learner_args is not None else made.learner_args
        router = fresh_router(policy, dict(args) if args is not None else None, classes=classes)
    n = 0
    for _, item in iter_final(store):
        learn_item(router, item, local_credit=credit)
        n += 1
    return router, n


@dataclass(frozen=True, slots=True)
class Recorded:
    """How the policy's learner made its model, as its checkpoint records it."""

    learner_args: Mapping[str, Any] | None = None
    local_credit: bool = False
    base: str | None = None  # the stored snapshot it started from (None: from scratch)


def recorded(log: EpisodeLog, policy: str) -> Recorded:
    """What the checkpoint of ``policy``'s learner records (no checkpoint yet: the defaults)."""
    checkpoint = LearnerStore(log.engine).checkpoint(policy)
    if checkpoint is None or checkpoint.snapshot_version is None:
        return Recorded()
    snapshot = log.get_snapshot(checkpoint.snapshot_version)
    meta = learner_meta(snapshot)
    base = meta.get("base")
    return Recorded(
        MappingProxyType(dict(snapshot.learner_args)),
        bool(meta.get("local_credit", False)),
        str(base) if base else None,
    )


def learner_meta(snapshot: PolicySnapshot) -> dict[str, Any]:
    """What the learner recorded in ``snapshot`` about how it was made (empty: not a learner's)."""
    meta = snapshot.metrics.get(META_KEY)
    return dict(meta) if isinstance(meta, Mapping) else {}
