"""Routing-decision and trajectory scoring against a stand-in scorer (no model needed)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest

from memabra._errors import InvalidRecordError
from memabra.evals.mempo import (
    AnswerProbabilities,
    AnswerScorer,
    RoutingDecisionItem,
    ScoringProgress,
    Trajectory,
    memory_probes,
    routing_contexts,
    score_memory_blocks,
    score_routing_decisions,
)


class ContainsGold:
    """P = 0.9 when the gold answer appears in the context, else 0.1; one token per word."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def answer_probabilities(self, contexts: Sequence[str], answers: Sequence[str]) -> AnswerProbabilities:
        self.calls.append(len(contexts))
        return AnswerProbabilities(
            probabilities=np.asarray(
                [0.9 if answer in context else 0.1 for context, answer in zip(contexts, answers, strict=True)]
            ),
            answer_tokens=np.asarray([len(answer.split()) for answer in answers]),
            sequence_tokens=np.asarray(
                [len(context.split()) + len(answer.split()) for context, answer in zip(contexts, answers, strict=True)]
            ),
        )


def item(index: int, selected_has_gold: bool) -> RoutingDecisionItem:
    fact = "the capital of france is paris"
    selected = (fact,) if selected_has_gold else ("bob likes tea",)
    return RoutingDecisionItem(
        id=f"d{index}",
        question="what is the capital of france?",
        selected=selected,
        candidates=("bob likes tea", fact),
        gold_answer="paris",
    )


def test_the_stand_in_is_an_answer_scorer() -> None:
    assert isinstance(ContainsGold(), AnswerScorer)


def test_decisions_are_graded_in_chunks_in_input_order() -> None:
    scorer = ContainsGold()
    items = [item(i, selected_has_gold=i % 2 == 0) for i in range(5)]
    progress: list[ScoringProgress] = []
    chunks = list(
        score_routing_decisions(
            scorer, items, chunk_size=2, on_progress=progress.append, clock=itertools.count().__next__
        )
    )
    assert scorer.calls == [4, 4, 2]
    scores = [score for chunk in chunks for score in chunk]
    assert [score.id for score in scores] == [f"d{i}" for i in range(5)]
    assert [score.reward for score in scores] == [1, -1, 1, -1, 1]
    assert scores[1].p_selected == 0.1 and scores[1].p_all == 0.9 and scores[1].difference == pytest.approx(-0.8)
    assert scores[0].answer_tokens == 1
    selected_context, all_context = routing_contexts(items[0])
    assert scores[0].tokens == len(selected_context.split()) + len(all_context.split()) + 2
    assert [(p.items_done, p.items_total) for p in progress] == [(2, 5), (4, 5), (5, 5)]
    assert progress[-1].tokens_done == sum(score.tokens for score in scores)
    assert progress[-1].elapsed_s == 3 and progress[-1].tokens_per_second == progress[-1].tokens_done / 3


def test_an_unsized_stream_is_consumed_lazily() -> None:
    scorer = ContainsGold()
    stream = (item(i, True) for i in range(7))
    progress: list[ScoringProgress] = []
    chunks = score_routing_decisions(scorer, stream, chunk_size=3, on_progress=progress.append)
    first = next(chunks)
    assert len(first) == 3 and scorer.calls == [6]
    assert sum(len(chunk) for chunk in chunks) == 4
    assert progress[-1].items_total is None and progress[-1].items_done == 7


def test_eps_turns_a_small_loss_into_a_plus_one() -> None:
    class Fixed(ContainsGold):
        def answer_probabilities(self, contexts: Sequence[str], answers: Sequence[str]) -> AnswerProbabilities:
            half = len(contexts) // 2
            probabilities = np.asarray([0.48] * half + [0.5] * half)
            ones = np.ones(len(contexts), dtype=np.int64)
            return AnswerProbabilities(probabilities, ones, ones)

    strict = next(score_routing_decisions(Fixed(), [item(0, True)]))
    lenient = next(score_routing_decisions(Fixed(), [item(0, True)], eps=0.05))
    assert strict[0].reward == -1 and lenient[0].reward == 1


def test_bad_arguments_are_refused_before_any_work() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        score_routing_decisions(ContainsGold(), [], chunk_size=0)
    with pytest.raises(ValueError, match="eps"):
        score_routing_decisions(ContainsGold(), [], eps=-1.0)
    with pytest.raises(TypeError, match="RoutingDecisionItem"):
        list(score_routing_decisions(ContainsGold(), [{"id": "x"}]))  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"id": ""}, "id"),
        ({"gold_answer": "  "}, "gold_answer"),
        ({"selected": "one string"}, "selected"),
        ({"candidates": ("ok", 3)}, "candidates"),
    ],
)
def test_decision_items_validate_their_fields(changes: dict[str, object], field: str) -> None:
    fields: dict[str, object] = {"id": "d", "question": "q", "selected": [], "candidates": ["m"], "gold_answer": "a"}
    with pytest.raises(InvalidRecordError, match=field):
        RoutingDecisionItem(**{**fields, **changes})  # type: ignore[arg-type]


def test_an_empty_selection_is_the_question_alone() -> None:
    decision = RoutingDecisionItem(id="d", question="q?", selected=[], candidates=["m1", "m2"], gold_answer="a")  # type: ignore[arg-type]
    assert decision.selected == ()
    assert routing_contexts(decision) == ("q?\n<mem>\n</mem>\n<answer>", "q?\n<mem>\nm1\nm2\n</mem>\n<answer>")


TRAJECTORY = Trajectory(
    question="capital of france?",
    turns=(
        "<mem>nothing</mem><think>search</think><search>france</search><tool_response>paris is the capital</tool_response>",
        "<think>no memory here</think><search>x</search><tool_response>y</tool_response>",
        "<mem>bob likes tea</mem><think>answer</think><answer>paris</answer>",
    ),
    gold_answer="paris",
)


def test_memory_probes_cut_each_turn_before_its_tool_response_and_answer() -> None:
    probes = memory_probes([TRAJECTORY])
    assert [probe.turn for probe in probes] == [0, 2]
    first, last = probes
    assert first.mem_context == "capital of france?\n<mem>nothing</mem>\n<answer>"
    assert (
        first.full_context
        == "capital of france?\n<mem>nothing</mem><think>search</think><search>france</search>\n<answer>"
    )
    assert last.memory == "<mem>bob likes tea</mem>"
    assert last.full_context == (
        "capital of france?\n"
        + TRAJECTORY.turns[0]
        + "\n"
        + TRAJECTORY.turns[1]
        + "\n<mem>bob likes tea</mem><think>answer</think>\n<answer>"
    )


def test_memory_blocks_of_a_batch_go_through_the_scorer_in_one_call() -> None:
    scorer = ContainsGold()
    blocks = score_memory_blocks(scorer, [TRAJECTORY, TRAJECTORY])
    assert scorer.calls == [8]
    assert [(b.trajectory, b.turn) for b in blocks] == [(0, 0), (0, 2), (1, 0), (1, 2)]
    first, last = blocks[0], blocks[1]
    assert (first.p_mem, first.p_full, first.reward) == (0.1, 0.1, 1)
    assert (last.p_mem, last.p_full, last.reward) == (0.1, 0.9, -1)
    assert last.difference == pytest.approx(-0.8)
    assert score_memory_blocks(scorer, []) == [] and scorer.calls == [8]


def test_trajectories_validate_their_fields() -> None:
    with pytest.raises(InvalidRecordError, match="turns"):
        Trajectory(question="q", turns="<mem>x</mem>", gold_answer="a")  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError, match="gold_answer"):
        Trajectory(question="q", turns=(), gold_answer="")
    assert Trajectory(question="q", turns=["t"], gold_answer="a").turns == ("t",)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Trajectory"):
        memory_probes(["not a trajectory"])  # type: ignore[list-item]


def test_importing_the_package_loads_neither_torch_nor_transformers() -> None:
    probe = (
        "import sys, memabra.evals, memabra.evals.mempo; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    assert (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )
