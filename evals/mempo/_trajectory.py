"""The memory reward of MemPO trajectories: for the ``<mem>`` block written at turn t, P(gold | the
block alone) against P(gold | the whole trajectory up to turn t), both from the same model."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memabra._errors import InvalidRecordError
from memabra.evals.mempo._advantage import memory_reward
from memabra.evals.mempo._probability import AnswerScorer, format_context

__all__ = ["MemoryBlockScore", "MemoryProbe", "Trajectory", "memory_probes", "score_memory_blocks"]

_MEM_BLOCK = re.compile(r"<mem>.*?</mem>", re.DOTALL)
_AFTER_MEMORY = re.compile(r"<tool_response>|<answer>")


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One agent trajectory: its question, its turns (each an assistant message followed by the
    tool response it received, if any) and the gold answer."""

    question: str
    turns: tuple[str, ...]
    gold_answer: str

    def __post_init__(self) -> None:
        if not isinstance(self.question, str):
            raise InvalidRecordError("Trajectory.question must be a string")
        if isinstance(self.turns, str) or not isinstance(self.turns, Sequence):
            raise InvalidRecordError("Trajectory.turns must be a sequence of strings, not a single string")
        turns = tuple(self.turns)
        for index, turn in enumerate(turns):
            if not isinstance(turn, str):
                raise InvalidRecordError(f"Trajectory.turns[{index}] must be a string, got {type(turn).__name__}")
        object.__setattr__(self, "turns", turns)
        if not isinstance(self.gold_answer, str) or not self.gold_answer.strip():
            raise InvalidRecordError("Trajectory.gold_answer must be a non-empty string")


@dataclass(frozen=True, slots=True)
class MemoryProbe:
    """The two contexts that grade the memory written at ``turn`` of trajectory ``trajectory``."""

    trajectory: int
    turn: int
    memory: str
    mem_context: str
    full_context: str
    gold_answer: str


@dataclass(frozen=True, slots=True)
class MemoryBlockScore:
    """P_mem and P_full of one ``<mem>`` block, ``difference = p_mem - p_full`` and the reward
    (+1 when ``p_mem >= p_full - eps``, else -1)."""

    trajectory: int
    turn: int
    p_mem: float
    p_full: float
    difference: float
    reward: int
    answer_tokens: int


def memory_probes(trajectories: Sequence[Trajectory]) -> list[MemoryProbe]:
    """One probe per turn that holds a complete ``<mem>…</mem>`` block (its first one).

    MEM is the question and that block. FULL is the question, every earlier turn with its tool
    response, and turn t as the agent wrote it up to its own tool response or answer, whichever
    comes first: the tool response arrives after the memory was written, and the agent's own
    answer would leak a guess into the context the gold answer is scored after. Neither
    depends on the format check.
    """
    probes: list[MemoryProbe] = []
    for index, trajectory in enumerate(trajectories):
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"trajectories[{index}] must be a Trajectory, got {type(trajectory).__name__}")
        for turn_index, turn in enumerate(trajectory.turns):
            block = _MEM_BLOCK.search(turn)
            if block is None:
                continue
            after = _AFTER_MEMORY.search(turn, block.end())
            written = turn[: after.start()] if after else turn
            history = "\n".join([*trajectory.turns[:turn_index], written.rstrip()])
            probes.append(
                MemoryProbe(
                    trajectory=index,
                    turn=turn_index,
                    memory=block.group(0),
                    mem_context=format_context(trajectory.question, block.group(0)),
                    full_context=format_context(trajectory.question, history),
                    gold_answer=trajectory.gold_answer,
                )
            )
    return probes


def score_memory_blocks(
    scorer: AnswerScorer, trajectories: Sequence[Trajectory], eps: float = 0.0
) -> list[MemoryBlockScore]:
    """P_mem and P_full of every ``<mem>`` block of a batch of trajectories, all 2N sequences in one
    call to the scorer, in trajectory then turn order."""
    probes = memory_probes(trajectories)
    if not probes:
        return []
    golds = [probe.gold_answer for probe in probes]
    scored = scorer.answer_probabilities(
        [probe.mem_context for probe in probes] + [probe.full_context for probe in probes], golds + golds
    )
    count = len(probes)
    p_mem, p_full = scored.probabilities[:count], scored.probabilities[count:]
    rewards = memory_reward(p_mem, p_full, eps=eps)
    return [
        MemoryBlockScore(
            trajectory=probe.trajectory,
            turn=probe.turn,
            p_mem=float(p_mem[i]),
            p_full=float(p_full[i]),
            difference=float(p_mem[i] - p_full[i]),
            reward=int(rewards[i]),
            answer_tokens=int(scored.answer_tokens[i]),
        )
        for i, probe in enumerate(probes)
    ]
