from __future__ import annotations

import numpy as np
import pytest

from memabra.evals.mempo import (
    final_advantage,
    find_mem_spans,
    grpo_memory_advantage,
    grpo_outcome_advantage,
    memory_reward,
)

WORKED_EXAMPLE = [1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1]


def test_the_specs_worked_example() -> None:
    scores = np.asarray(WORKED_EXAMPLE, dtype=float)
    assert scores.mean() == pytest.approx(0.5625)
    assert scores.std(ddof=1) == pytest.approx(0.5123, abs=1e-4)
    advantage = grpo_outcome_advantage(scores, [7] * 16)
    np.testing.assert_allclose(advantage[scores == 1], 0.854, atol=1e-3)
    np.testing.assert_allclose(advantage[scores == 0], -1.098, atol=1e-3)


def test_a_group_of_one_and_an_all_equal_group_get_zero() -> None:
    advantage = grpo_outcome_advantage(
        [1.0, 0.3, 0.3, 0.3, 0.0, 0.0], ["solo", "same", "same", "same", "zeros", "zeros"]
    )
    np.testing.assert_array_equal(advantage, np.zeros(6))


def test_mixed_groups_are_normalised_separately() -> None:
    scores = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0]
    groups = ["q1", "q2", "q1", "q2", "q2", "q3"]
    advantage = grpo_outcome_advantage(scores, groups)
    q1 = np.asarray([1.0, 0.0])
    q2 = np.asarray([0.0, 1.0, 0.5])
    expected = np.zeros(6)
    expected[[0, 2]] = (q1 - q1.mean()) / (q1.std(ddof=1) + 1e-6)
    expected[[1, 3, 4]] = (q2 - q2.mean()) / (q2.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(advantage, expected)
    assert advantage[5] == 0.0


def test_outcome_advantage_is_broadcast_over_response_tokens_only() -> None:
    mask = np.asarray([[1, 1, 1, 0], [1, 1, 0, 0]])
    advantage = grpo_outcome_advantage([1.0, 0.0], [0, 0], response_mask=mask)
    per_trajectory = grpo_outcome_advantage([1.0, 0.0], [0, 0])
    np.testing.assert_allclose(advantage, per_trajectory[:, None] * mask)
    assert advantage.shape == (2, 4)


def test_torch_tensors_come_back_as_tensors() -> None:
    torch = pytest.importorskip("torch")
    mask = torch.ones((3, 5), dtype=torch.long)
    advantage = grpo_outcome_advantage(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([4, 4, 4]), response_mask=mask)
    assert isinstance(advantage, torch.Tensor) and advantage.dtype == torch.float32 and advantage.shape == (3, 5)
    np.testing.assert_allclose(advantage[:, 0].numpy(), grpo_outcome_advantage([1.0, 0.0, 1.0], [4, 4, 4]), rtol=1e-6)
    rewards = memory_reward(torch.tensor([0.2, 0.5], dtype=torch.bfloat16), torch.tensor([0.3, 0.5]))
    assert isinstance(rewards, torch.Tensor) and rewards.tolist() == [-1.0, 1.0]


def test_outcome_advantage_rejects_misaligned_input() -> None:
    with pytest.raises(ValueError, match="group_ids"):
        grpo_outcome_advantage([1.0, 0.0], [0])
    with pytest.raises(ValueError, match="scores"):
        grpo_outcome_advantage([1.0, float("nan")], [0, 0])
    with pytest.raises(ValueError, match="response_mask"):
        grpo_outcome_advantage([1.0, 0.0], [0, 0], response_mask=np.ones((3, 2)))


def test_memory_reward_compares_with_a_tolerance() -> None:
    assert memory_reward(0.4, 0.4) == 1.0
    assert memory_reward(0.39, 0.4) == -1.0
    assert memory_reward(0.39, 0.4, eps=0.02) == 1.0
    np.testing.assert_array_equal(memory_reward(np.asarray([0.9, 0.1]), np.asarray([0.5, 0.5])), [1.0, -1.0])
    with pytest.raises(ValueError, match="p_full"):
        memory_reward(0.5, 1.5)
    with pytest.raises(ValueError, match="eps"):
        memory_reward(0.5, 0.5, eps=-0.1)
    with pytest.raises(ValueError, match="shape"):
        memory_reward([0.5, 0.5], [0.5])


def test_memory_advantage_is_written_on_mem_spans_only_and_pooled_per_group() -> None:
    mask = np.ones((3, 10))
    mask[2, 8:] = 0
    rewards = [[1.0, -1.0], [-1.0], [1.0, 1.0]]
    spans = [[(0, 3), (5, 7)], [(2, 4)], [(0, 2), (6, 10)]]
    advantage = grpo_memory_advantage(rewards, spans, ["q", "q", "solo"], mask)
    pool = np.asarray([1.0, -1.0, -1.0])
    normalised = (pool - pool.mean()) / (pool.std(ddof=1) + 1e-6)
    expected = np.zeros((3, 10))
    expected[0, 0:3], expected[0, 5:7], expected[1, 2:4] = normalised
    np.testing.assert_allclose(advantage, expected)
    on_spans = np.zeros((3, 10), dtype=bool)
    for row, row_spans in enumerate(spans):
        for start, end in row_spans:
            on_spans[row, start:end] = True
    assert np.all(advantage[~on_spans] == 0.0)
    assert np.all(advantage[2] == 0.0)  # a group whose pooled rewards are equal


def test_final_advantage_adds_memory_on_mem_tokens_to_outcome_everywhere() -> None:
    mem_open, mem_close, word = [5, 6], [7], 1
    response = [*mem_open, word, word, *mem_close, word, word, *mem_open, word, *mem_close, word]
    spans = find_mem_spans(response, mem_open, mem_close)
    assert spans == [(0, 5), (7, 11)]
    other = [*mem_open, word, *mem_close, word, word, word, word, word, word, word, word]
    mask = np.ones((2, len(response)))
    outcome = grpo_outcome_advantage([1.0, 0.0], ["q", "q"], response_mask=mask)
    memory = grpo_memory_advantage(
        [[1.0, -1.0], [-1.0]], [spans, find_mem_spans(other, mem_open, mem_close)], ["q", "q"], mask
    )
    final = final_advantage(outcome, memory)
    in_mem = memory != 0.0
    np.testing.assert_allclose(final[~in_mem], outcome[~in_mem])
    np.testing.assert_allclose(final[in_mem], outcome[in_mem] + memory[in_mem])
    assert in_mem[0].sum() == 9 and in_mem[1].sum() == 4


def test_final_advantage_on_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    outcome = torch.ones((2, 3))
    memory = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    final = final_advantage(outcome, memory)
    assert isinstance(final, torch.Tensor) and final.tolist() == [[1.0, 3.0, 1.0], [1.0, 1.0, 1.0]]
    with pytest.raises(ValueError, match="shape"):
        final_advantage(outcome, torch.ones((2, 4)))


def test_find_mem_spans_skips_an_unclosed_block_and_takes_tensors() -> None:
    assert find_mem_spans([5, 1, 7, 5, 1, 1], [5], [7]) == [(0, 3)]
    assert find_mem_spans([1, 2, 3], [5], [7]) == []
    torch = pytest.importorskip("torch")
    assert find_mem_spans(torch.tensor([9, 5, 6, 1, 7, 8]), [5, 6], [7, 8]) == [(1, 6)]
    with pytest.raises(ValueError, match="one-dimensional"):
        find_mem_spans(np.zeros((2, 2)), [5], [7])


@pytest.mark.parametrize(
    ("rewards", "spans", "message"),
    [
        ([[1.0]], [[(0, 2)]], "one entry per trajectory"),
        ([[1.0], []], [[(0, 2), (3, 4)], []], "mem_spans"),
        ([[1.0, 1.0], []], [[(0, 3), (2, 4)], []], "overlap"),
        ([[1.0], []], [[(3, 9)], []], "outside"),
    ],
)
def test_memory_advantage_rejects_bad_spans(
    rewards: list[list[float]], spans: list[list[tuple[int, int]]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        grpo_memory_advantage(rewards, spans, [0, 0], np.ones((2, 5)))
