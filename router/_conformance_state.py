"""The conformance checks of what a router learns: a snapshot, a restore and a replica carry every
learned state (they go on learning as the original does), and ``learn_logged`` -- how the learner
process, a restarted agent and a replay teach a router -- learns exactly what ``learn`` does.

Learned state is compared by :func:`~memabra.router.learned_model`'s bytes, as the runtime's
checkpoints and ``memabra learner --replay`` compare it; a message names pickled model bytes, whose
bytes differ between equal models, apart from state a snapshot left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from memabra._records import Candidate, RewardBreakdown, RewardComponents, RewardWeights, RoutingContext, Selection
from memabra.router._base import Router
from memabra.router._snapshot_codec import decode_envelope
from memabra.router._watcher import learned_model

__all__ = ["check_learned_state", "check_logged_learning", "check_replica", "reward", "signature", "snapshot_hint"]

_SNAPSHOT_HINT = (
    "does the router keep its learned state in _model_bytes / _load_model or _extra_state, "
    "written canonically (sort_keys=True, sets as sorted lists)?"
)
# pickle's opcodes for protocols 2-5 start with PROTO and the protocol number
_PICKLE_PROTOCOLS = range(2, 6)


def signature(selection: Selection) -> tuple[object, ...]:
    return tuple((d.candidate_ids, d.probabilities, d.chosen_id) for d in selection.slots) + (selection.seed,)


def reward(total_hit: bool) -> RewardBreakdown:
    return RewardBreakdown(
        RewardComponents(s=1.0 if total_hit else 0.0, hm=0.5 if total_hit else -1.0, x=0.2), RewardWeights()
    )


def snapshot_hint(router: Router) -> str:
    """Why two routers that learned alike can hold other model bytes: a pickle (which the suite can
    recognise) or state left out of the snapshot / written in no fixed order."""
    _header, payload = decode_envelope(router.snapshot().model, router.name)
    if len(payload) > 1 and payload[0] == 0x80 and payload[1] in _PICKLE_PROTOCOLS:
        return (
            f"{type(router).__name__}._model_bytes returns a pickle, whose bytes depend on object identity "
            "as well as on state (two equal scikit-learn models pickle to different bytes): write the learned "
            "arrays instead, json.dumps({'coef': coef.tolist(), ...}, sort_keys=True).encode() or np.save"
        )
    return _SNAPSHOT_HINT


def check_replica(router: Router, restored: Router, context: RoutingContext, candidates: tuple[Candidate, ...]) -> None:
    """``replica()`` is ``restore(snapshot())`` without the bytes, and shares no state with its source."""
    twin = router.replica(similarity=router.similarity)
    assert type(twin) is type(router) and twin is not router, "replica() must return a new router of the same class"
    assert twin.policy_version == router.policy_version, "a replica reports another version"
    assert twin.snapshot().model == restored.snapshot().model, (
        f"a replica's state differs from the restored router's: {snapshot_hint(router)}"
    )
    renamed = router.replica(similarity=router.similarity, version="renamed", parent="its-parent")
    assert (renamed.snapshot().version, renamed.snapshot().parent) == ("renamed", "its-parent"), (
        "replica(version=..., parent=...) must name the copy as a renamed snapshot"
    )
    probe = router.choose(context, candidates, seed=321)
    before = twin.slot_probabilities(probe)
    assert before == restored.slot_probabilities(probe), "a replica predicts differently from the restored router"
    router.learn(probe, reward(True), {cid: 1.0 for cid in probe.chosen_ids})
    assert twin.slot_probabilities(probe) == before, "learning on the source changed its replica"


def check_learned_state(router: Router, context: RoutingContext, candidates: tuple[Candidate, ...]) -> None:
    """A restored router and a replica go on as the original does: making the same decisions and
    learning the same rewards, all three choose alike and end with the same learned model."""
    trio = (
        router,
        type(router).restore(router.snapshot(), similarity=router.similarity),
        router.replica(similarity=router.similarity),
    )
    for i in range(4):
        made = [learner.choose(context, candidates, seed=1000 + i) for learner in trio]
        for selection, what in zip(made[1:], ("a restored router", "a replica"), strict=True):
            assert signature(selection) == signature(made[0]), (
                f"{what} chose differently from the original after learning the same rewards: {_SNAPSHOT_HINT}"
            )
        for learner, selection in zip(trio, made, strict=True):
            learner.learn(selection, reward(i % 2 == 0), {cid: float(i % 2 == 0) for cid in selection.chosen_ids})
    model = learned_model(router.snapshot())
    for learner, what in zip(trio[1:], ("a restored router", "a replica"), strict=True):
        assert learned_model(learner.snapshot()) == model, (
            f"{what} learned the same rewards as the original and ended with another model: {snapshot_hint(router)}"
        )


def check_logged_learning(
    factory: Callable[[int], Router], context: RoutingContext, candidates: tuple[Candidate, ...]
) -> None:
    """Two routers built alike and making the same decisions, one taught its own selections with
    ``learn`` (the bench, an agent's turn), the other the first one's with ``learn_logged`` (the
    learner process, a restart, a replay), end with the same learned model."""
    served, taught = factory(7), factory(7)
    for i in range(4):
        selection = served.choose(context, candidates)
        # the same decision made by both: a learner's model may count what it served (VW's does)
        if signature(taught.choose(context, candidates)) != signature(selection):
            _learned_apart(served, "chose differently from")
        outcomes = {cid: float(i % 2 == 0) for cid in selection.chosen_ids}
        served.learn(selection, reward(i % 2 == 0), outcomes)
        taught.learn_logged(selection, reward(i % 2 == 0), outcomes)
    if learned_model(taught.snapshot()) != learned_model(served.snapshot()):
        _learned_apart(served, "ended with another model than")


def _learned_apart(served: Router, how: str) -> NoReturn:
    cls = type(served)
    overridden = [m for m in ("learn", "learn_logged") if getattr(cls, m) is not getattr(Router, m)]
    why = (
        f"{cls.__name__} overrides {' and '.join(overridden)}: learn in _update, which both call"
        if overridden
        else snapshot_hint(served)
    )
    raise AssertionError(
        "a router taught its selections with learn_logged (as memabra learner, a restarted agent and "
        f"memabra learner --replay teach it) {how} one taught them with learn: {why}"
    )
