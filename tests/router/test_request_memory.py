"""The learners' memory of recurring requests (memabra.router._request_memory): a request that comes
back is not served the candidates that failed it, the one that helped it is reached for first and
is enough, what the memory already knows is not fed to the generic learner again, and the memory
travels with snapshots."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from memabra import STOP_ID, Budget, Candidate, CandidateKind, RouterError, RoutingContext, SnapshotError
from memabra.router import CandidateStats, FeatureTable, LinearRouter, Router, Similarity, VWRouter, featurize
from memabra.router._request_memory import RequestMemory, request_key
from memabra.router._snapshot_codec import decode_envelope, encode_envelope

from .conftest import HashingEncoder

SIM = Similarity(encoder=HashingEncoder())
LEARNERS: dict[str, Callable[..., Router]] = {
    "vw": lambda **kw: VWRouter(similarity=SIM, **kw),
    "linear": lambda **kw: LinearRouter(similarity=SIM, **kw),
}
TOPICS = ["espresso machine", "grinder", "milk frother", "descaling kit", "coffee beans", "tamper", "water filter", "warranty"]
MEMORIES = tuple(
    Candidate(f"m{i}", CandidateKind.MEMORY, f"the customer asked about the {topic} order and shipping", 30)
    for i, topic in enumerate(TOPICS)
)
BUDGET = Budget(max_tokens=1000, slots={CandidateKind.MEMORY: 3})
ASK = RoutingContext("which accessory did I add to my espresso machine order for free shipping", "u1",
                     kinds=(CandidateKind.MEMORY,), budget=BUDGET)
RELEVANT = "m7"  # ranked last by similarity: hybrid's top 3 never holds it


def _ranks(router: Router) -> dict[str, int]:
    return {sc.candidate.id: sc.rank for sc in router.choose(ASK, MEMORIES, seed=0).offered}


def _round(router: Router) -> tuple[str, ...]:
    selection = router.choose(ASK, MEMORIES)
    outcomes = {cid: float(cid == RELEVANT) for cid in selection.chosen_ids}
    router.learn(selection, 1.0 if RELEVANT in outcomes and outcomes[RELEVANT] else -0.3, outcomes)
    return selection.chosen_ids


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_a_request_that_comes_back_is_served_other_candidates_then_the_one_that_helped(name: str) -> None:
    router = LEARNERS[name]()
    ranks = _ranks(router)
    assert ranks[RELEVANT] >= 3
    first = _round(router)
    assert [ranks[c] for c in first] == [0, 1, 2]  # a fresh router is the hybrid baseline
    second = _round(router)
    assert not set(second) & set(first)  # the three that failed are passed over
    third = _round(router)
    while RELEVANT not in third:  # the untried ones come next, best first
        assert not set(third) & (set(first) | set(second))
        third = _round(router)
    served = router.choose(ASK, MEMORIES)
    assert served.chosen_ids == (RELEVANT,)  # reached for first, and enough


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_another_request_or_another_user_is_not_affected(name: str) -> None:
    router, fresh = LEARNERS[name](), LEARNERS[name]()
    _round(router)
    for context in (replace(ASK, user_id="u2"), replace(ASK, query="when does the grinder ship")):
        assert router.featurize(context, MEMORIES).column("failed_here").sum() == 0.0
        assert router.choose(context, MEMORIES).chosen_ids == fresh.choose(context, MEMORIES).chosen_ids


def test_a_slate_reward_without_outcomes_is_not_remembered() -> None:
    router = VWRouter(similarity=SIM)
    selection = router.choose(ASK, MEMORIES)
    router.learn(selection, -0.3)
    assert router.featurize(ASK, MEMORIES).column("failed_here").sum() == 0.0


def test_the_request_key_ignores_case_punctuation_and_stop_words_but_not_the_user() -> None:
    same = replace(ASK, query="Which accessory did I add to my ESPRESSO machine order, for free shipping?")
    assert request_key(same) == request_key(ASK)
    assert request_key(replace(ASK, user_id="u2")) != request_key(ASK)
    assert request_key(replace(ASK, query="which accessory did I add to my grinder order")) != request_key(ASK)


def test_memory_features_and_old_rows_without_them() -> None:
    table = featurize(ASK, MEMORIES, similarity=SIM, request={"m0": CandidateStats(3, 1), "m1": CandidateStats(2, 0)})
    assert table.column("failed_here")[:3] == pytest.approx([np.log1p(2), np.log1p(2), 0.0])
    assert table.column("helped_here")[:3] == pytest.approx([np.log1p(1), 0.0, 0.0])
    with pytest.raises(RouterError, match="helped this request more often"):
        featurize(ASK, MEMORIES, similarity=SIM, request={"m0": CandidateStats(1, 2)})
    old_rows = [{k: v for k, v in row.items() if not k.endswith("_here")} for row in table.rows]
    restored = FeatureTable.from_rows(MEMORIES, old_rows)
    assert restored.column("helped_here").sum() == 0.0 and restored.rows[0]["failed_here"] == 0.0


def test_what_the_memory_knows_is_not_learned_again(monkeypatch: pytest.MonkeyPatch) -> None:
    router = VWRouter(similarity=SIM)
    while RELEVANT not in _round(router):
        pass
    served = router.choose(ASK, MEMORIES)
    assert served.chosen_ids == (RELEVANT,) and served.slots[1].chosen_id == STOP_ID
    fitted: list[tuple[int, int]] = []
    original = VWRouter._fit

    def spy(self: VWRouter, view: object, option: int, target: float, probability: float) -> None:
        fitted.append((view.slot, option))  # type: ignore[attr-defined]
        original(self, view, option, target, probability)  # type: ignore[arg-type]

    monkeypatch.setattr(VWRouter, "_fit", spy)
    router.learn(served, 1.0, {RELEVANT: 1.0})
    # the memorised pick (slot 0) is skipped; the stop decision after it (slot 1) is learned
    assert fitted and all(slot == 1 for slot, _ in fitted)


def test_the_memory_is_bounded_and_travels_with_snapshots() -> None:
    router = VWRouter(similarity=SIM, request_memory=2)
    contexts = [replace(ASK, query=q) for q in ("when does the grinder ship", "is the tamper in stock", ASK.query)]
    for context in contexts:
        selection = router.choose(context, MEMORIES)
        outcomes = {cid: float(j == 0) for j, cid in enumerate(selection.chosen_ids)}
        router.learn(selection, 1.0, outcomes)
    assert len(router._requests) == 2
    restored = VWRouter.restore(router.snapshot(), similarity=SIM)
    for source in (router, restored):
        remembered = [source.featurize(c, MEMORIES).column("helped_here").sum() > 0.0 for c in contexts]
        assert remembered == [False, True, True]  # the least recent request was forgotten
    assert restored.choose(ASK, MEMORIES, seed=4).chosen_ids == router.choose(ASK, MEMORIES, seed=4).chosen_ids


def test_disabled_memory_remembers_nothing() -> None:
    router = VWRouter(similarity=SIM, request_memory=0)
    _round(router)
    assert router.featurize(ASK, MEMORIES).column("failed_here").sum() == 0.0


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_capacity_names_the_parameter(value: object) -> None:
    with pytest.raises(RouterError, match="request_memory"):
        VWRouter(similarity=SIM, request_memory=value).choose(ASK, MEMORIES)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "state",
    [
        {"requests": "not a list"},
        {"requests": [["key"]]},
        {"requests": [["key", {"m0": [1, 2]}]]},  # helped more often than chosen
        {"requests": [["key", {"m0": [-1, 0]}]]},
    ],
)
def test_a_corrupted_request_memory_in_a_snapshot_is_refused(state: dict[str, object]) -> None:
    router = VWRouter(similarity=SIM)
    _round(router)
    snapshot = router.snapshot()
    header, payload = decode_envelope(snapshot.model, "vw")
    header["state"] = {**header["state"], **state}
    broken = replace(snapshot, model=encode_envelope("vw", header, payload))
    with pytest.raises(SnapshotError, match="request memory"):
        VWRouter.restore(broken, similarity=SIM)


def test_a_snapshot_from_before_the_memory_restores_empty() -> None:
    router = VWRouter(similarity=SIM)
    _round(router)
    snapshot = router.snapshot()
    header, payload = decode_envelope(snapshot.model, "vw")
    header["state"] = {"learned": header["state"]["learned"]}
    restored = VWRouter.restore(replace(snapshot, model=encode_envelope("vw", header, payload)), similarity=SIM)
    assert restored.featurize(ASK, MEMORIES).column("failed_here").sum() == 0.0


def test_request_memory_unit() -> None:
    memory = RequestMemory(capacity=1)
    assert memory.stats(ASK) == {}
    memory.restore([["a", {"m0": [2, 1]}], ["b", {"m1": [1, 0]}]])
    assert len(memory) == 1 and memory.state() == [["b", {"m1": [1, 0]}]]


def test_outcomes_are_remembered_without_local_credit(monkeypatch: pytest.MonkeyPatch) -> None:
    router = VWRouter(similarity=SIM)
    seen: list[bool] = []
    original = VWRouter._update

    def spy(self: VWRouter, selection: object, credits: tuple) -> None:  # type: ignore[type-arg]
        seen.extend(c.local for c in credits)
        original(self, selection, credits)  # type: ignore[arg-type]

    monkeypatch.setattr(VWRouter, "_update", spy)
    selection = router.choose(ASK, MEMORIES)
    router.learn(selection, -0.3, {cid: 0.0 for cid in selection.chosen_ids}, local_credit=False)
    assert seen and not any(seen)  # the slate shared the reward
    assert router.featurize(ASK, MEMORIES).column("failed_here").sum() > 0.0  # and the outcomes were kept
    with pytest.raises(RouterError, match="did not choose"):
        router.learn(router.choose(ASK, MEMORIES), 0.0, {"not-chosen": 1.0}, local_credit=False)
