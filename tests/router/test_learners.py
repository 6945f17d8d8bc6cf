"""Learner behaviour beyond the conformance contract: no cold-start regret, learning from
failures, learning to stop, snapshots of learned state, hot swaps, and thread safety."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np
import pytest

from memabra import (
    STOP_ID,
    Budget,
    Candidate,
    CandidateKind,
    PolicySnapshot,
    RouterError,
    RoutingContext,
    SlotDraw,
    SnapshotError,
)
from memabra.router import (
    HybridRouter,
    LexicalRouter,
    LinearRouter,
    ResidualRouter,
    Router,
    Similarity,
    SnapshotWatcher,
    VWRouter,
    load_router,
)
from memabra.router._slots import SlotView
from memabra.router._snapshot_codec import decode_envelope, encode_envelope

from .conftest import HashingEncoder

SIM = Similarity(encoder=HashingEncoder())
# greedy: these tests follow what is learned, not the exploration draws (tests/router/test_exploration.py)
LEARNERS: dict[str, Callable[[int], Router]] = {
    "vw": lambda seed: VWRouter(seed=seed, similarity=SIM, exploration="greedy"),
    "linear": lambda seed: LinearRouter(seed=seed, similarity=SIM, exploration="greedy"),
}

TOOLS = (
    Candidate("doctor.search", CandidateKind.TOOL, "doctor.search: search for doctors and specialists in a city", 20),
    Candidate("lawyer.search", CandidateKind.TOOL, "lawyer.search: find lawyers by practice area", 20),
    Candidate("weather.get", CandidateKind.TOOL, "weather.get: forecast for a city", 12),
)
TOOL_CONTEXT = RoutingContext(
    "search for divorce law specialists in Los Angeles",
    "u1",
    kinds=(CandidateKind.TOOL,),
    budget=Budget(max_tokens=100, slots={CandidateKind.TOOL: 1}),
)
MEMORIES = tuple(
    Candidate(f"m{i}", CandidateKind.MEMORY, text, 30)
    for i, text in enumerate(
        [
            "the user lives in Seattle",
            "the user likes oat milk lattes",
            "the espresso machine arrived bent",
            "the user is a graphic designer in Seattle",
            "the grinder ships from the Portland warehouse",
        ]
    )
)
MEMORY_CONTEXT = RoutingContext(
    "where in Seattle does the user live",
    "u1",
    kinds=(CandidateKind.MEMORY,),
    budget=Budget(max_tokens=1000, slots={CandidateKind.MEMORY: 3}),
)


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_a_fresh_learner_chooses_exactly_as_the_hybrid_baseline(name: str) -> None:
    learner, hybrid = LEARNERS[name](0), HybridRouter(similarity=SIM)
    for context, pool in [(TOOL_CONTEXT, TOOLS), (MEMORY_CONTEXT, MEMORIES)]:
        ours, theirs = learner.choose(context, pool), hybrid.choose(context, pool)
        assert ours.chosen_ids == theirs.chosen_ids
        assert STOP_ID not in [d.chosen_id for d in ours.slots[: len(theirs.chosen_ids)]]


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_learning_from_a_failure_fixes_the_choice(name: str) -> None:
    router = LEARNERS[name](0)
    first = router.choose(TOOL_CONTEXT, TOOLS)
    assert first.chosen_ids == ("doctor.search",)  # similarity gets this one wrong
    picks = []
    for _ in range(6):
        selection = router.choose(TOOL_CONTEXT, TOOLS)
        picks.append(selection.chosen_ids)
        helped = {cid: float(cid == "lawyer.search") for cid in selection.chosen_ids}
        router.learn(selection, 1.3 if any(helped.values()) else -0.35, helped)
    assert picks[-1] == ("lawyer.search",)


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_a_learner_logs_its_own_score_in_the_priors_units(name: str) -> None:
    router = LEARNERS[name](0)
    fresh = router.choose(TOOL_CONTEXT, TOOLS)
    assert [sc.score for sc in fresh.offered] == pytest.approx([sc.features["hyb_z"] for sc in fresh.offered])
    for _ in range(6):
        selection = router.choose(TOOL_CONTEXT, TOOLS)
        helped = {cid: float(cid == "lawyer.search") for cid in selection.chosen_ids}
        router.learn(selection, 1.3 if any(helped.values()) else -0.35, helped)
    learned = router.choose(TOOL_CONTEXT, TOOLS)
    # the first (only) slot had every tool open: its distribution ranks them as the logged scores do
    (draw,) = learned.slots
    by_score = sorted(learned.offered, key=lambda sc: -sc.score)
    assert by_score[0].candidate.id == "lawyer.search" == learned.chosen_ids[0]
    assert [sc.rank for sc in by_score] == [0, 1, 2]
    assert draw.candidate_ids[int(max(range(3), key=lambda i: draw.probabilities[i]))] == "lawyer.search"
    learner_parts = [sc.score - sc.features["hyb_z"] for sc in learned.offered]
    assert max(abs(v) for v in learner_parts) > 0.1


def test_the_logged_score_is_the_score_of_the_first_slot_of_the_kind_in_that_decision() -> None:
    # the linear learner scores what earlier slots picked into a candidate (co-needed items): a
    # tool's logged score must carry the memories picked before the tool slots, as its draw did
    from memabra.router._residual import PRIOR_OFFSET, PRIOR_SCALE

    router = LinearRouter(seed=0, similarity=SIM, exploration="greedy")
    pool = MEMORIES + TOOLS
    context = RoutingContext(
        "which lawyer in Seattle should the user call",
        "u1",
        kinds=(CandidateKind.MEMORY, CandidateKind.TOOL),
        budget=Budget(max_tokens=10_000, slots={CandidateKind.MEMORY: 2, CandidateKind.TOOL: 2}),
    )
    rng = np.random.default_rng(0)
    for _ in range(30):
        selection = router.choose(context, pool)
        outcomes = {cid: float(rng.random() < 0.5) for cid in selection.chosen_ids}
        router.learn(selection, float(rng.normal()), outcomes)
    checked = 0
    for _ in range(5):
        selection = router.choose(context, pool)
        score_of = {sc.candidate.id: sc.score for sc in selection.offered}
        seen: set[CandidateKind] = set()
        for view, _draw, _options in router._replay(selection):
            if view.kind in seen:
                continue
            seen.add(view.kind)
            costs = router._candidate_costs(view)
            ids = [view.table.candidates[row].id for row in view.eligible]
            assert [score_of[cid] for cid in ids] == pytest.approx(list(-(costs + PRIOR_OFFSET) / PRIOR_SCALE))
            checked += bool(view.chosen)
    assert checked > 0  # some tool slot came after picked memories


def _learned_slot_views(router: LinearRouter, steps: int, budgets: tuple[Budget, ...]) -> Iterator[SlotView]:
    """Every slot of ``steps`` decisions that ``router`` makes and learns from (memories picked before
    the tool slots, so the pair terms are in), each under the next of ``budgets`` in turn."""
    pool = MEMORIES + TOOLS
    rng = np.random.default_rng(router.seed)
    for step in range(steps):
        context = RoutingContext(
            "which lawyer in Seattle should the user call",
            f"u{step % 3}",
            kinds=(CandidateKind.MEMORY, CandidateKind.TOOL),
            budget=replace(budgets[step % len(budgets)], slots={CandidateKind.MEMORY: 3, CandidateKind.TOOL: 2}),
        )
        selection = router.choose(context, pool)
        for view, _draw, _options in router._replay(selection):
            yield view
        router.learn(selection, float(rng.normal()), {cid: float(rng.random() < 0.5) for cid in selection.chosen_ids})


def test_the_linear_slot_costs_are_the_prior_plus_its_residuals_term_by_term() -> None:
    # _prior_and_costs sums the terms every row shares over the whole table first; _residuals and
    # the count model's predict are the same model term by term, on every slot of learned decisions
    # and under a tight budget
    router = LinearRouter(seed=3, similarity=SIM)
    compared = 0
    for view in _learned_slot_views(router, 40, (Budget(max_tokens=10_000), Budget(max_tokens=40))):
        prior, costs = router._prior_and_costs(view)
        reference = router._prior_cost(view) + (router._residuals(view) + router._count.predict(view))
        assert prior.tolist() == router._prior_cost(view).tolist()
        assert np.allclose(costs, reference, rtol=0.0, atol=1e-12)
        compared += 1
    assert compared > 80


def test_the_linear_exploration_references_are_the_priors_top_and_the_baselines_own_picks() -> None:
    # the linear learner reads the prior's top-M and hybrid's pick off its open rows in similarity
    # order; they must be what partitions of the prior give (as sets: the prior has no ties here)
    # and exactly what HybridRouter and LexicalRouter pick at the same slot
    router = LinearRouter(seed=5, similarity=SIM)
    hybrid, lexical = HybridRouter(similarity=SIM), LexicalRouter(similarity=SIM)
    compared = 0
    for view in _learned_slot_views(router, 30, (Budget(max_tokens=10_000),)):
        if not view.eligible:
            continue
        for top_m in (1, 2, 4, 6):
            costs, prior_top, modes = router._costs_and_references(view, top_m)
            reference = ResidualRouter._costs_and_references(router, view, top_m)
            assert costs.tolist() == reference[0].tolist()
            assert sorted(prior_top) == sorted(reference[1]) and modes == reference[2]
        options = len(view.eligible)
        assert modes == (
            int(np.argmax(hybrid._slot_distribution(view)[:options])),
            int(np.argmax(lexical._slot_distribution(view)[:options])),
        )
        compared += 1
    assert compared > 60


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_it_learns_to_inject_fewer_when_extra_memories_go_unused(name: str) -> None:
    router = LEARNERS[name](0)
    sizes = []
    for _ in range(12):
        selection = router.choose(MEMORY_CONTEXT, MEMORIES)
        sizes.append(len(selection.chosen_ids))
        outcomes = {cid: float(cid == "m0") for cid in selection.chosen_ids}
        router.learn(selection, 1.0 if outcomes.get("m0") else -0.35, outcomes)
    assert sizes[0] == 3
    assert sizes[-1] < 3
    final = router.choose(MEMORY_CONTEXT, MEMORIES)
    assert "m0" in final.chosen_ids


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_snapshots_keep_learned_state_and_lineage(name: str) -> None:
    router = LEARNERS[name](3)
    for _ in range(3):
        selection = router.choose(TOOL_CONTEXT, TOOLS)
        router.learn(selection, -0.3, {cid: 0.0 for cid in selection.chosen_ids})
    snapshot = router.snapshot()
    assert snapshot.version.endswith("+3") and snapshot.parent == snapshot.version.split("+")[0]
    restored = type(router).restore(snapshot, similarity=SIM)
    probe = router.choose(TOOL_CONTEXT, TOOLS, seed=9)
    assert restored.slot_probabilities(probe) == router.slot_probabilities(probe)
    assert load_router(snapshot, similarity=SIM).slot_probabilities(probe) == router.slot_probabilities(probe)
    follow_up = restored.choose(TOOL_CONTEXT, TOOLS)
    restored.learn(follow_up, 1.0)
    child = restored.snapshot()
    assert child.parent == snapshot.version and child.version == f"{snapshot.version}+1"


def test_count_model_state_round_trips_and_older_snapshots_restore_it_empty() -> None:
    router = LEARNERS["linear"](3)
    for _ in range(3):
        selection = router.choose(MEMORY_CONTEXT, MEMORIES)
        router.learn(selection, 0.5, {cid: float(cid == "m0") for cid in selection.chosen_ids})
    snapshot = router.snapshot()
    header, payload = decode_envelope(snapshot.model, "linear")
    assert any(header["state"]["count_model"]["moment"])
    restored = LinearRouter.restore(snapshot, similarity=SIM)
    assert (restored._count.weights == router._count.weights).all()  # type: ignore[attr-defined]

    def rewrapped(state: dict[str, object]) -> PolicySnapshot:
        body = {k: v for k, v in header.items() if k != "policy"}
        return replace(snapshot, model=encode_envelope("linear", {**body, "state": state}, payload))

    older = {k: v for k, v in header["state"].items() if k != "count_model"}
    assert not LinearRouter.restore(rewrapped(older), similarity=SIM)._count.weights.any()  # type: ignore[attr-defined]
    with pytest.raises(SnapshotError, match="count model"):
        LinearRouter.restore(rewrapped({**older, "count_model": {"gram": [1.0], "moment": []}}), similarity=SIM)


def test_count_model_prediction_is_its_features_times_its_weights_wherever_a_row_sits() -> None:
    router = LEARNERS["linear"](5)
    for _ in range(6):
        selection = router.choose(MEMORY_CONTEXT, MEMORIES)
        router.learn(selection, 0.5, {cid: float(cid == "m0") for cid in selection.chosen_ids})
    count = router._count  # type: ignore[attr-defined]
    assert count.weights.any()
    table = router.featurize(MEMORY_CONTEXT, MEMORIES)
    rows = tuple(range(len(MEMORIES)))
    full = SlotView(MEMORY_CONTEXT, table, CandidateKind.MEMORY, 1, 1, rows, (), None)
    assert np.allclose(count.predict(full), count.rows(full) @ count.weights, rtol=0.0, atol=1e-12)
    # under the same lead (the best open similarity, given here), a row's prediction is the same
    # number in a slot that leaves others out: the offer scores read a kind's first slot off the table
    part = SlotView(MEMORY_CONTEXT, table, CandidateKind.MEMORY, 1, 1, rows[1:], (), None)
    top = float(table.column("hyb_z").max())
    assert count.predict(part, top)[:-1].tolist() == count.predict(full, top)[1:-1].tolist()


def test_vw_rejects_a_well_wrapped_but_broken_model() -> None:
    snapshot = VWRouter(similarity=SIM).snapshot()
    header, _ = decode_envelope(snapshot.model, "vw")
    broken = encode_envelope("vw", {k: v for k, v in header.items() if k != "policy"}, b"not a vw model at all")
    with pytest.raises(SnapshotError, match="Vowpal Wabbit"):
        VWRouter.restore(replace(snapshot, model=broken))
    with pytest.raises(SnapshotError, match="unknown policy"):
        load_router(replace(snapshot, policy="mystery"))
    with pytest.raises(SnapshotError, match="learner_args"):
        VWRouter.restore(replace(snapshot, learner_args={"exploration": "telepathy"}))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"exploration": "telepathy"}, "exploration"),
        ({"epsilon": 2.0}, "epsilon"),
        ({"top_m": 0}, "top_m"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"min_probability": 1.0}, "min_probability"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_parameters_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(RouterError, match=field):
        VWRouter(similarity=SIM, **kwargs).choose(TOOL_CONTEXT, TOOLS)  # type: ignore[arg-type]


def test_teacher_forcing_another_policys_log() -> None:
    logged = HybridRouter(similarity=SIM, min_probability=0.05).choose(MEMORY_CONTEXT, MEMORIES)
    target = VWRouter(similarity=SIM, exploration="epsilon", epsilon=0.2)
    probabilities = target.slot_probabilities(logged)
    for draw, ours in zip(logged.slots, probabilities, strict=True):
        assert len(ours) == len(draw.candidate_ids) and sum(ours) == pytest.approx(1.0)
    # a logged slot without the stop option: the target renormalises over what was offered
    slot = logged.slots[0]
    ids, values = slot.candidate_ids[:-1], _renormalised(slot.probabilities[:-1])
    trimmed = SlotDraw(slot.slot, slot.kind, ids, values, slot.chosen_id, values[ids.index(slot.chosen_id)])
    only_first = replace(logged, slots=(trimmed,))
    (first,) = target.slot_probabilities(only_first)
    assert len(first) == len(trimmed.candidate_ids) and sum(first) == pytest.approx(1.0)
    target.learn_logged(logged, 1.0, {logged.chosen_ids[0]: 1.0})


def _renormalised(values: tuple[float, ...]) -> tuple[float, ...]:
    total = sum(values)
    return tuple(v / total for v in values)


def test_watcher_serves_newer_snapshots_and_keeps_old_rewards() -> None:
    now = [0.0]
    published: list[PolicySnapshot | None] = [None]
    trainer = VWRouter(similarity=SIM, seed=1)
    watcher = SnapshotWatcher(
        VWRouter(similarity=SIM), lambda: published[0], interval_s=10.0, similarity=SIM, clock=lambda: now[0]
    )
    before = watcher.choose(TOOL_CONTEXT, TOOLS)
    original = watcher.current
    for _ in range(2):
        selection = trainer.choose(TOOL_CONTEXT, TOOLS)
        trainer.learn(selection, -0.3, {cid: 0.0 for cid in selection.chosen_ids})
    published[0] = trainer.snapshot()
    watcher.choose(TOOL_CONTEXT, TOOLS)  # within the interval: not asked yet
    assert watcher.current is original
    now[0] = 11.0
    after = watcher.choose(TOOL_CONTEXT, TOOLS)
    assert watcher.current is not original and after.policy_version == published[0].version
    watcher.learn(before, 1.0, {before.chosen_ids[0]: 1.0})  # made by the old router: learned off-policy
    watcher.learn(after, 1.0)
    with pytest.raises(RouterError):
        watcher.learn(after, 1.0)
    assert watcher.refresh() is False  # same version again: nothing to do


def test_a_replaced_router_is_not_kept_alive_by_its_pending_selections() -> None:
    """A hot reload replaces the serving router; the selections it made and that still wait for a
    reward must not keep it (a whole model) alive: the in-process learner learns them from the log,
    so they may wait forever."""
    published: list[PolicySnapshot | None] = [None]
    trainer = LinearRouter(similarity=SIM, seed=1)
    watcher = SnapshotWatcher(LinearRouter(similarity=SIM), lambda: published[0], interval_s=0.0, similarity=SIM)
    pending = [watcher.choose(TOOL_CONTEXT, TOOLS)]  # by the initial router, which the watcher keeps
    replaced: weakref.ref[Router] | None = None
    for _ in range(3):
        selection = trainer.choose(TOOL_CONTEXT, TOOLS)
        trainer.learn(selection, -0.3, {cid: 0.0 for cid in selection.chosen_ids})
        published[0] = trainer.snapshot()
        pending.append(watcher.choose(TOOL_CONTEXT, TOOLS))
        replaced = replaced or weakref.ref(watcher.current)  # the first reloaded router
    gc.collect()
    assert replaced is not None and replaced() is None
    watcher.learn(pending[1], 1.0)  # its maker is gone: learned off-policy by the current router


def test_watcher_survives_a_failing_source(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> PolicySnapshot:
        raise ConnectionError("database is down")

    watcher = SnapshotWatcher(VWRouter(similarity=SIM), broken, similarity=SIM)
    assert watcher.refresh() is False
    assert watcher.choose(TOOL_CONTEXT, TOOLS).chosen_ids
    assert "snapshot source failed" in caplog.text


def test_concurrent_decisions_share_one_workspace_safely() -> None:
    router = VWRouter(similarity=SIM)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(15):
                selection = router.choose(MEMORY_CONTEXT, MEMORIES)
                router.learn(selection, 0.5, {cid: 0.0 for cid in selection.chosen_ids})
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert router.policy_version.endswith("+60")
