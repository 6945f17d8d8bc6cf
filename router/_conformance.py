"""The checks every router must pass, in the spirit of scikit-learn's ``check_estimator``.

``check_router(factory)`` builds routers with ``factory(seed)`` and raises ``AssertionError`` naming
the first broken contract: a new router per call with its seed and a policy name of its own, valid
logged distributions and propensities, budgets and kinds respected, the probability floor,
exploration (every option of a learner's explored set keeps its floor), seeded determinism, draws
that follow the logged distributions (which depend on the model and the slot only, never on the
seed or on earlier decisions), teacher-forced replays that reproduce them, inputs left unchanged,
learning only from its own selections, snapshot round-trips and replicas that keep every learned
state (they go on learning as the original does, :mod:`memabra.router._conformance_state`),
``learn_logged`` learning what ``learn`` does (the learner process teaches with it), and a clear
:class:`~memabra.RouterError` / :class:`~memabra.SnapshotError` for every bad input.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memabra._errors import InvalidRecordError, RouterError, SnapshotError
from memabra._records import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    CandidateStats,
    PolicySnapshot,
    RoutingContext,
    Selection,
)
from memabra.router._base import Router
from memabra.router._conformance_setup import RouterFactory, check_factory, check_input_list, check_name, router_factory
from memabra.router._conformance_state import (
    check_learned_state,
    check_logged_learning,
    check_replica,
    reward,
    signature,
    snapshot_hint,
)
from memabra.router._exploration import exploration_floor
from memabra.router._features import FeatureTable

__all__ = ["check_router", "conformance_candidates"]

# decisions of an unchanged router whose first-slot picks are counted against the logged distribution
_DRAWS = 300
# the Router parameters a restored router must carry over (a subclass forwarding **kwargs lost them)
_BASE_PARAMS = ("seed", "min_probability", "recall_limit", "unused_penalty", "max_pending")
# what makes one input choose or replay differently from call to call
_DETERMINISM_HINT = (
    "_slot_distribution must be a function of the model and the view: no unseeded randomness "
    "(np.random.*, random.*), clock, Python hash() or uncached model call in it, and no state that choose changes"
)


def conformance_candidates() -> tuple[Candidate, ...]:
    """A small mixed pool: four memories, two skills, three tools, one oversized memory."""
    return (
        Candidate(
            "m-seattle",
            CandidateKind.MEMORY,
            "The user lives in Seattle and works as a designer.",
            12,
            {"source": "chat"},
            usage=CandidateStats(3, 2),
            created_at=datetime(2025, 1, 1, tzinfo=UTC),
        ),
        Candidate(
            "m-latte",
            CandidateKind.MEMORY,
            "The user likes oat milk lattes in the morning.",
            10,
            usage=CandidateStats(1, 0),
            created_at=datetime(2025, 2, 1, tzinfo=UTC),
        ),
        Candidate("m-name", CandidateKind.MEMORY, "The user's first name is Michael.", 8),
        Candidate(
            "m-espresso", CandidateKind.MEMORY, "The espresso machine order arrived with a bent portafilter.", 14
        ),
        Candidate("m-huge", CandidateKind.MEMORY, "A very long transcript " * 40, 900),
        Candidate("s-refund", CandidateKind.SKILL, "How to process a refund for a damaged order.", 30),
        Candidate("s-weather", CandidateKind.SKILL, "How to answer questions about the weather forecast.", 25),
        Candidate("t-weather", CandidateKind.TOOL, "weather.get: current weather and forecast for a city", 20),
        Candidate("t-order", CandidateKind.TOOL, "orders.lookup: find an order and its shipping status", 22),
        Candidate("t-calc", CandidateKind.TOOL, "calculator.eval: evaluate an arithmetic expression", 15),
    )


def _context(
    query: str = "what is the weather in seattle for my espresso order", budget: Budget | None = None
) -> RoutingContext:
    return RoutingContext(
        query=query,
        user_id="conformance-user",
        budget=budget
        or Budget(max_tokens=200, slots={CandidateKind.MEMORY: 3, CandidateKind.SKILL: 1, CandidateKind.TOOL: 2}),
    )


def _expect(error: type[Exception], what: str, call: Callable[[], object]) -> None:
    try:
        call()
    except error:
        return
    except Exception as exc:  # noqa: BLE001 - the point is to report the wrong type
        raise AssertionError(f"{what}: raised {type(exc).__name__}: {exc}, expected {error.__name__}") from exc
    raise AssertionError(f"{what}: no {error.__name__} raised")


def check_selection(router: Router, selection: Selection, candidates: tuple[Candidate, ...]) -> None:
    """Contracts of one selection made by ``router`` from ``candidates``."""
    context = selection.context
    budget = context.budget
    assert selection.policy == router.name, f"Selection.policy {selection.policy!r} != router name {router.name!r}"
    assert selection.policy_version == router.policy_version, "Selection.policy_version is not the router's"
    offered = {sc.candidate.id for sc in selection.offered}
    assert offered <= {c.id for c in candidates}, "offered candidates that were not given"
    assert all(sc.candidate.kind in context.kinds for sc in selection.offered), "offered a kind not requested"
    counts: dict[CandidateKind, int] = {}
    for chosen in selection.chosen:
        counts[chosen.kind] = counts.get(chosen.kind, 0) + 1
    for kind, count in counts.items():
        assert count <= budget.slots_for(kind), f"chose {count} {kind.value}s, budget allows {budget.slots_for(kind)}"
    if budget.max_tokens is not None:
        assert selection.tokens_injected <= budget.max_tokens, "selection exceeds the token budget"
    product = 1.0
    for draw in selection.slots:
        assert draw.candidate_ids[-1] == STOP_ID, f"slot {draw.slot}: the stop option must be offered last"
        assert math.isclose(sum(draw.probabilities), 1.0, abs_tol=1e-6), (
            f"slot {draw.slot}: probabilities do not sum to 1"
        )
        floor = float(router.min_probability)
        if floor > 0.0:
            assert min(draw.probabilities) >= floor - 1e-12, (
                f"slot {draw.slot}: a probability is below the floor {floor}"
            )
        product *= draw.chosen_probability
    assert math.isclose(selection.propensity, product, rel_tol=1e-12), "propensity is not the product of the slots"
    check_exploration(router, selection)


def check_exploration(router: Router, selection: Selection) -> None:
    """A learner exploring with ``epsilon`` gives the stop option, at least ``top_m`` candidates (all
    of them when fewer are open) and the prior's ``top_m`` (highest ``hyb_z``) of every slot the
    floor ``epsilon / (2 top_m + 1)``; and teacher-forced replay reproduces every logged slot."""
    if getattr(router, "exploration", None) != "epsilon":
        return
    explorer: Any = router  # duck-typed: any router exploring with epsilon names these, not only ResidualRouter
    epsilon, top_m = float(explorer.epsilon), int(explorer.top_m)
    hyb_z = {sc.candidate.id: float(sc.features["hyb_z"]) for sc in selection.offered}
    for draw in selection.slots:
        n_candidates = len(draw.candidate_ids) - 1
        floor = exploration_floor(n_candidates + 1, top_m, epsilon) * (1.0 - 1e-9)
        assert draw.probabilities[-1] >= floor, f"slot {draw.slot}: the stop option is below the exploration floor"
        explored = sum(1 for p in draw.probabilities[:-1] if p >= floor)
        assert explored >= min(top_m, n_candidates), (
            f"slot {draw.slot}: {explored} candidates at the exploration floor {floor:.4g}, expected {min(top_m, n_candidates)}"
        )
        by_prior = sorted(range(n_candidates), key=lambda k: -hyb_z[draw.candidate_ids[k]])[:top_m]
        assert all(draw.probabilities[k] >= floor for k in by_prior), (
            f"slot {draw.slot}: a candidate among the prior's top {top_m} is below the exploration floor {floor:.4g}"
        )
    replayed = router.slot_probabilities(selection)
    for draw, probabilities in zip(selection.slots, replayed, strict=True):
        assert np.allclose(probabilities, draw.probabilities, atol=1e-9), (
            f"slot {draw.slot}: teacher-forced replay gives {probabilities}, the log {draw.probabilities}"
        )


def check_router(factory: RouterFactory | type[Router] | Router) -> None:
    """Run every conformance check against routers built by ``factory(seed)``; a :class:`Router`
    subclass is built as ``cls(seed=seed, similarity=Similarity())``, an instance is cloned from its
    ``get_params()`` with each seed."""
    factory = router_factory(factory)
    candidates = conformance_candidates()
    context = _context()
    check_factory(factory, context, candidates)

    # choosing: valid selections, seeded determinism, replays
    router = factory(7)
    check_name(router)
    first = router.choose(context, candidates)
    check_selection(router, first, candidates)
    assert first.slots, "a router with room in the budget made no slot draw"
    twin = factory(7)
    assert signature(twin.choose(context, candidates)) == signature(first), (
        f"two routers built with one seed chose differently from the same input: {_DETERMINISM_HINT}"
    )
    assert signature(router.choose(context, candidates, seed=first.seed)) == signature(first), (
        f"choose with the logged seed did not reproduce the logged selection: {_DETERMINISM_HINT}"
    )
    replayed = router.slot_probabilities(first)
    assert len(replayed) == len(first.slots), "slot_probabilities has the wrong number of slots"
    for draw, probabilities in zip(first.slots, replayed, strict=True):
        assert np.allclose(probabilities, draw.probabilities, atol=1e-9), (
            f"slot {draw.slot}: teacher-forced replay gives {probabilities}, the log {draw.probabilities}: "
            f"{_DETERMINISM_HINT}"
        )
    check_input_list(router, context, candidates)

    # precomputed features give the same selection, and stay as they were
    table = router.featurize(context, candidates)
    matrix = table.matrix.copy()
    assert signature(router.choose(context, candidates, features=table, seed=first.seed)) == signature(first), (
        "precomputed features changed the selection"
    )
    assert np.array_equal(table.matrix, matrix), "choose changed the precomputed features it was given"

    # budgets
    tight = router.choose(_context(budget=Budget(max_tokens=5)), candidates)
    assert tight.slots == () and tight.chosen_ids == (), (
        "a budget smaller than every candidate must give an empty selection"
    )
    nothing = router.choose(_context(budget=Budget(max_tokens=None, slots={})), candidates)
    assert nothing.slots == (), "zero slots must give an empty selection"
    tools_only = router.choose(replace(context, kinds=(CandidateKind.TOOL,)), candidates)
    assert all(c.kind is CandidateKind.TOOL for c in tools_only.chosen), "chose a kind that was not requested"

    # learning from its own selections only
    own = router.choose(context, candidates)
    router.learn(own, reward(True), {cid: 1.0 for cid in own.chosen_ids[:1]})
    _expect(RouterError, "learning the same selection twice", lambda: router.learn(own, 1.0))
    stranger = factory(7).choose(context, candidates)
    _expect(RouterError, "a reward for a selection the router never made", lambda: router.learn(stranger, 1.0))
    again = router.choose(context, candidates)
    _expect(RouterError, "a NaN reward", lambda: router.learn(again, float("nan")))
    _expect(
        RouterError, "an outcome for a candidate that was not chosen", lambda: router.learn(again, 1.0, {"nope": 1.0})
    )
    if again.chosen_ids:
        _expect(RouterError, "a NaN outcome", lambda: router.learn(again, 1.0, {again.chosen_ids[0]: float("nan")}))
    _expect(RouterError, "missing given as one string", lambda: router.learn(again, 1.0, missing="t-calc"))
    if again.chosen_ids:
        _expect(
            RouterError, "a missing id that was chosen", lambda: router.learn(again, 1.0, missing=[again.chosen_ids[0]])
        )
    left_out = [sc.candidate.id for sc in again.offered if sc.candidate.id not in again.chosen_ids]
    router.learn(again, 0.5, {cid: 0.0 for cid in again.chosen_ids}, missing=[*left_out[:1], "never-offered"])
    router.learn_logged(stranger, reward(False))  # off-policy learning takes anyone's selection

    # after learning: selections stay valid and every logged distribution replays exactly
    for i in range(6):
        later = router.choose(context, candidates)
        check_selection(router, later, candidates)
        for draw, probabilities in zip(later.slots, router.slot_probabilities(later), strict=True):
            assert np.allclose(probabilities, draw.probabilities, atol=1e-9), (
                "replay after learning differs from the log"
            )
        router.learn(later, reward(i % 2 == 0), {cid: float(i % 2) for cid in later.chosen_ids})
    check_draws(router, candidates)

    # bad input
    _expect(RouterError, "an empty candidate list", lambda: router.choose(context, []))
    _expect(RouterError, "duplicate candidate ids", lambda: router.choose(context, [candidates[0], candidates[0]]))
    _expect(RouterError, "a non-Candidate in candidates", lambda: router.choose(context, ["m-seattle"]))  # type: ignore[list-item]
    _expect(RouterError, "a context that is not a RoutingContext", lambda: router.choose("query", candidates))  # type: ignore[arg-type]
    overhelped = replace(candidates[0], usage=CandidateStats(times_chosen=1, times_helped=2))
    _expect(RouterError, "more helps than choices", lambda: router.choose(context, [overhelped, *candidates[1:]]))
    bad_matrix = table.matrix.copy()
    bad_matrix[0, 0] = float("nan")
    _expect(RouterError, "NaN features", lambda: FeatureTable(table.candidates, bad_matrix, table.rows))
    _expect(
        RouterError,
        "features misaligned with candidates",
        lambda: router.choose(context, candidates[::-1], features=table),
    )
    _expect(InvalidRecordError, "negative slots", lambda: Budget(slots={CandidateKind.MEMORY: -1}))

    # snapshots
    snapshot = router.snapshot()
    assert isinstance(snapshot, PolicySnapshot) and snapshot.policy == router.name, (
        "snapshot() must return a PolicySnapshot"
    )
    assert snapshot.version == router.policy_version, "snapshot version differs from policy_version"
    restored = type(router).restore(snapshot, similarity=router.similarity)
    probe = router.choose(context, candidates, seed=123)
    assert restored.slot_probabilities(probe) == router.slot_probabilities(probe), (
        f"restored router predicts differently: {snapshot_hint(router)}"
    )
    assert restored.policy_version == router.policy_version, "restored router reports another version"
    lost = [p for p in _BASE_PARAMS if getattr(restored, p) != getattr(router, p)]
    assert not lost, (
        f"a restored router has other {', '.join(lost)}: its constructor must take the Router arguments "
        "(or **kwargs) and forward them to Router.__init__, so get_params() records them"
    )
    assert signature(restored.choose(context, candidates)) == signature(
        type(router).restore(snapshot, similarity=router.similarity).choose(context, candidates)
    ), "two restores of one snapshot choose differently"
    check_replica(router, restored, context, candidates)
    corrupt = bytearray(snapshot.model)
    corrupt[-1] ^= 0xFF
    _expect(
        SnapshotError, "corrupted snapshot bytes", lambda: type(router).restore(replace(snapshot, model=bytes(corrupt)))
    )
    _expect(
        SnapshotError,
        "truncated snapshot bytes",
        lambda: type(router).restore(replace(snapshot, model=snapshot.model[:20])),
    )
    _expect(
        SnapshotError,
        "a snapshot of another policy",
        lambda: type(router).restore(replace(snapshot, policy="someone-else")),
    )
    _expect(TypeError, "pickling a router", lambda: pickle.dumps(router))
    check_learned_state(router, context, candidates)
    check_logged_learning(factory, context, candidates)


def check_draws(router: Router, candidates: tuple[Candidate, ...]) -> None:
    """Decisions of an unchanged router on one input, seeds ``0 .. _DRAWS - 1``: each logs the same
    first-slot distribution (it depends on the model and the slot, not on the seed or on earlier
    decisions), the picks follow it (within five standard deviations), and the first decision still
    replays as logged after the others."""
    one_slot = _context(budget=Budget(max_tokens=200, slots={CandidateKind.TOOL: 1}))
    selections = [router.choose(one_slot, candidates, seed=seed) for seed in range(_DRAWS)]
    logged = selections[0].slots[0]
    counts = dict.fromkeys(logged.candidate_ids, 0)
    for seed, selection in enumerate(selections):
        draw = selection.slots[0]
        assert draw.candidate_ids == logged.candidate_ids and np.allclose(
            draw.probabilities, logged.probabilities, rtol=0.0, atol=1e-12
        ), (
            f"an unchanged router logged {draw.probabilities} with seed {seed} and {logged.probabilities} with "
            "seed 0 for the same input: a slot's distribution must depend on the model and the slot only "
            "(the slot loop draws from it with the decision's seed)"
        )
        counts[draw.chosen_id] += 1
    for cid, p in zip(logged.candidate_ids, logged.probabilities, strict=True):
        expected = _DRAWS * p
        assert abs(counts[cid] - expected) <= 5.0 * math.sqrt(_DRAWS * p * (1.0 - p)) + 2.0, (
            f"{cid!r} was drawn {counts[cid]} times in {_DRAWS} decisions; its logged probability {p:.4g} "
            f"predicts {expected:.1f}: what is drawn must follow what is logged"
        )
    for selection in (selections[0], selections[-1]):
        replayed = router.slot_probabilities(selection)
        assert np.allclose(replayed[0], selection.slots[0].probabilities, atol=1e-9), (
            "a logged decision no longer replays after later decisions (no learning in between): "
            "choose must not change what the router predicts"
        )
