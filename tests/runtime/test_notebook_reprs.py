"""Records shown in a notebook (a cell's last line, ``print``) stay short and say what matters.

A Selection's default dataclass repr held every offered candidate with all its features: 43 kB for
one decision over 128 memories, and an Episode, a Turn, a list of either, printed as much again per
decision. A PolicySnapshot printed its model's bytes (megabytes for a Vowpal Wabbit model).
"""

from __future__ import annotations

from memabra import Budget, Candidate, CandidateKind, RoutingContext
from memabra._turns import Turn
from memabra.router import LinearRouter, Similarity


def _selection(n: int = 128):  # type: ignore[no-untyped-def]
    router = LinearRouter(similarity=Similarity(encoder=None))
    candidates = [
        Candidate(f"mem:{i}", CandidateKind.MEMORY, f"fact {i} about the user's dog Rex and their flat", 12)
        for i in range(n)
    ]
    context = RoutingContext(query="what is my dog called?", user_id="ann", thread_id="t-1", budget=Budget())
    return router, router.choose(context, candidates)


def test_a_selection_repr_names_the_draws_not_every_candidates_features() -> None:
    _, selection = _selection()
    shown = repr(selection)
    assert len(shown) < 1000, len(shown)
    assert "features" not in shown
    assert f"offered=<{len(selection.offered)} candidates>" in shown
    assert selection.id in shown and selection.policy_version in shown and "'ann'" in shown
    for draw in selection.slots:
        assert f"{draw.chosen_id} p={draw.chosen_probability:.4g}" in shown
    assert f"propensity={selection.propensity:.4g}" in shown


def test_a_turn_in_flight_shows_its_selection_short_and_not_its_kept_copy() -> None:
    _, selection = _selection()
    turn = Turn("t1", "ann", "t-1", 0, "what is my dog called?", selection, "prompt", ())
    assert len(repr(turn)) < 2000


def test_a_snapshot_repr_gives_its_model_size_not_its_bytes() -> None:
    router, _ = _selection(4)
    snapshot = router.snapshot()
    shown = repr(snapshot)
    assert f"model=<{len(snapshot.model)} bytes>" in shown
    assert repr(snapshot.model[:16]) not in shown
    assert snapshot.version in shown and "status='candidate'" in shown
