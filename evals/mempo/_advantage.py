"""GRPO advantages of MemPO: the outcome advantage broadcast over a response, the memory reward of
each ``<mem>`` block, the memory advantage written on ``<mem>`` spans only, and their sum.

Arrays follow one convention across the module: ``scores`` has shape (n_trajectories,),
``group_ids`` is aligned with it, ``response_mask`` has shape (n_trajectories, n_tokens) with 1 on
response tokens. NumPy arrays, lists and torch tensors are accepted; a token-level result comes back
in the container of ``response_mask`` (a float32 tensor on its device for a torch mask), anything
else in the container of its first argument. torch is imported only when a tensor is passed in.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "final_advantage",
    "find_mem_spans",
    "grpo_memory_advantage",
    "grpo_outcome_advantage",
    "memory_reward",
]

_DEFAULT_EPS = 1e-6


def grpo_outcome_advantage(scores: Any, group_ids: Any, response_mask: Any = None, eps: float = _DEFAULT_EPS) -> Any:
    """Group-normalised outcome advantage.

    ``A_i = (s_i - mean_g) / (std_g + eps)`` over the trajectories of the group ``g`` that ``i``
    belongs to (the ones sampled for the same question), with the unbiased standard deviation. A
    group of one, or a group whose scores are all equal, gets 0.

    Returns shape (n,) without ``response_mask``; with it, shape (n, T): the value of each
    trajectory broadcast onto every response token, 0 on the rest.
    """
    values = _vector(scores, "scores")
    groups = _group_index(group_ids, len(values), "group_ids")
    advantage = _group_normalise(values, groups, _check_eps(eps))
    if response_mask is None:
        return _like(advantage, scores)
    mask = _token_mask(response_mask, len(values))
    return _like(advantage[:, None] * mask, response_mask)


def memory_reward(p_mem: Any, p_full: Any, eps: float = 0.0) -> Any:
    """+1 where the memory alone predicts the gold answer as well as the full context did,
    ``P_mem >= P_full - eps``, else -1. Scalars give a float, arrays an array of the same shape."""
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite non-negative number, got {eps!r}")
    mem = _probabilities(p_mem, "p_mem")
    full = _probabilities(p_full, "p_full")
    if mem.shape != full.shape:
        raise ValueError(f"p_mem has shape {mem.shape} but p_full has shape {full.shape}")
    reward = np.where(mem >= full - eps, 1.0, -1.0)
    if reward.ndim == 0:
        return float(reward)
    return _like(reward, p_mem)


def grpo_memory_advantage(
    mem_rewards: Sequence[Sequence[float]],
    mem_spans: Sequence[Sequence[tuple[int, int]]],
    group_ids: Any,
    response_mask: Any,
    eps: float = _DEFAULT_EPS,
) -> Any:
    """Memory advantage on ``<mem>`` tokens, 0 everywhere else.

    ``mem_rewards[i][j]`` is the reward of the j-th ``<mem>`` block of trajectory i and
    ``mem_spans[i][j] = (start, end)`` its token span (end exclusive) in the response. The rewards
    of all blocks of all trajectories of a group are pooled and normalised together,
    ``(r - mean_g) / (std_g + eps)`` (unbiased std; a pool of one or of equal rewards gives 0), and
    each block's value is written on its own span. Returns shape (n, T) like ``response_mask``.
    """
    mask = _token_mask(response_mask, _length(group_ids, "group_ids"))
    n_trajectories, n_tokens = mask.shape
    groups = _group_index(group_ids, n_trajectories, "group_ids")
    if len(mem_rewards) != n_trajectories or len(mem_spans) != n_trajectories:
        raise ValueError(
            f"mem_rewards ({len(mem_rewards)}) and mem_spans ({len(mem_spans)}) must hold one entry per "
            f"trajectory ({n_trajectories})"
        )
    flat_rewards: list[float] = []
    flat_groups: list[int] = []
    for i, (rewards, spans) in enumerate(zip(mem_rewards, mem_spans, strict=True)):
        if len(rewards) != len(spans):
            raise ValueError(f"trajectory {i}: {len(rewards)} mem_rewards but {len(spans)} mem_spans")
        _check_spans(spans, n_tokens, i)
        flat_rewards.extend(float(r) for r in rewards)
        flat_groups.extend([int(groups[i])] * len(rewards))
    pooled = _group_normalise(
        _vector(flat_rewards, "mem_rewards"), np.asarray(flat_groups, dtype=np.int64), _check_eps(eps)
    )
    advantage = np.zeros((n_trajectories, n_tokens), dtype=np.float64)
    block = 0
    for i, spans in enumerate(mem_spans):
        for start, end in spans:
            advantage[i, start:end] = pooled[block]
            block += 1
    return _like(advantage * mask, response_mask)


def final_advantage(outcome_advantage: Any, memory_advantage: Any) -> Any:
    """``final = outcome + memory`` token by token: ``<mem>`` tokens feel both the answer's
    correctness and the memory's quality, all other tokens the outcome only."""
    outcome = _as_array(outcome_advantage)
    memory = _as_array(memory_advantage)
    if outcome.shape != memory.shape:
        raise ValueError(f"outcome_advantage has shape {outcome.shape} but memory_advantage has shape {memory.shape}")
    return _like(outcome.astype(np.float64) + memory, outcome_advantage)


def find_mem_spans(token_ids: Any, open_ids: Sequence[int], close_ids: Sequence[int]) -> list[tuple[int, int]]:
    """Token spans ``(start, end)``, end exclusive, of every complete ``<mem>…</mem>`` block of a
    1-D token sequence; ``open_ids``/``close_ids`` are the tags' token ids (the tokenizer's encoding
    of ``<mem>`` and ``</mem>`` without special tokens). An unclosed ``<mem>`` is no block."""
    ids = _as_array(token_ids)
    if ids.ndim != 1:
        raise ValueError(f"token_ids must be one-dimensional, got shape {ids.shape}")
    opening, closing = list(open_ids), list(close_ids)
    if not opening or not closing:
        raise ValueError("open_ids and close_ids must be non-empty")
    sequence = ids.tolist()
    spans: list[tuple[int, int]] = []
    position = 0
    while True:
        start = _find(sequence, opening, position)
        if start < 0:
            return spans
        close = _find(sequence, closing, start + len(opening))
        if close < 0:
            return spans
        spans.append((start, close + len(closing)))
        position = close + len(closing)


def _find(sequence: list[int], pattern: list[int], start: int) -> int:
    width = len(pattern)
    for index in range(start, len(sequence) - width + 1):
        if sequence[index : index + width] == pattern:
            return index
    return -1


def _group_normalise(values: np.ndarray, groups: np.ndarray, eps: float) -> np.ndarray:
    advantage = np.zeros_like(values, dtype=np.float64)
    for group in np.unique(groups):
        members = groups == group
        pool = values[members]
        if len(pool) < 2 or np.all(pool == pool[0]):
            continue
        advantage[members] = (pool - pool.mean()) / (pool.std(ddof=1) + eps)
    return advantage


def _group_index(group_ids: Any, expected: int, field: str) -> np.ndarray:
    ids = _as_array(group_ids)
    if ids.ndim != 1 or len(ids) != expected:
        raise ValueError(f"{field} must hold one id per trajectory ({expected}), got shape {ids.shape}")
    index: dict[Hashable, int] = {}
    return np.asarray([index.setdefault(_hashable(g, field), len(index)) for g in ids.tolist()], dtype=np.int64)


def _hashable(value: Any, field: str) -> Hashable:
    if not isinstance(value, Hashable):
        raise ValueError(f"{field} must hold hashable ids, got {value!r}")
    return value


def _vector(values: Any, field: str) -> np.ndarray:
    array = _as_array(values).astype(np.float64)
    if array.ndim != 1:
        raise ValueError(f"{field} must be one-dimensional, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{field} must be finite")
    return array


def _probabilities(values: Any, field: str) -> np.ndarray:
    array = _as_array(values).astype(np.float64)
    if not np.all(np.isfinite(array)) or np.any(array < 0.0) or np.any(array > 1.0):
        raise ValueError(f"{field} must hold probabilities in [0, 1]")
    return array


def _token_mask(response_mask: Any, n_trajectories: int) -> np.ndarray:
    mask = _as_array(response_mask)
    if mask.ndim != 2 or mask.shape[0] != n_trajectories:
        raise ValueError(f"response_mask must have shape ({n_trajectories}, n_tokens), got {mask.shape}")
    binary: np.ndarray = (mask != 0).astype(np.float64)
    return binary


def _check_spans(spans: Sequence[tuple[int, int]], n_tokens: int, trajectory: int) -> None:
    previous_end = 0
    for start, end in sorted(spans):
        if not 0 <= start < end <= n_tokens:
            raise ValueError(
                f"trajectory {trajectory}: mem_spans entry ({start}, {end}) is outside [0, {n_tokens}) or empty"
            )
        if start < previous_end:
            raise ValueError(f"trajectory {trajectory}: mem_spans overlap at ({start}, {end})")
        previous_end = end


def _check_eps(eps: float) -> float:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite positive number, got {eps!r}")
    return float(eps)


def _length(values: Any, field: str) -> int:
    array = _as_array(values)
    if array.ndim != 1:
        raise ValueError(f"{field} must be one-dimensional, got shape {array.shape}")
    return len(array)


def _is_tensor(value: Any) -> bool:
    # duck-typed so that plain NumPy callers never import torch
    return hasattr(value, "detach") and hasattr(value, "device")


def _as_array(value: Any) -> np.ndarray:
    if _is_tensor(value):
        tensor = value.detach().cpu()
        # NumPy has no bfloat16; widen floating tensors before converting
        converted: np.ndarray = (tensor.float() if tensor.is_floating_point() else tensor).numpy()
        return converted
    return np.asarray(value)


def _like(result: np.ndarray, template: Any) -> Any:
    if _is_tensor(template):
        import torch

        return torch.as_tensor(result, dtype=torch.float32, device=template.device)
    return result
