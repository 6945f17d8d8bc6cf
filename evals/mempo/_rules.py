"""The rule-based outcome reward of MemPO: answer normalisation, exact match, answer extraction,
the eight format rules and the trajectory score.

A response is either a flat string or a sequence of turns. A turn is one assistant message followed
by the tool response it received, if any. In a flat string every ``<mem>`` opens a new turn, because
the format puts a memory block at the head of every turn; text before the first ``<mem>`` is a turn
of its own (one that fails rule 5).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence
from enum import StrEnum
from itertools import pairwise
from typing import TypeAlias

__all__ = [
    "FormatRule",
    "Response",
    "Target",
    "compute_score",
    "em_check",
    "extract_solution",
    "format_violations",
    "normalize_answer",
    "split_turns",
    "validate_format",
]

Response: TypeAlias = str | Sequence[str]
Target: TypeAlias = str | Sequence[str] | Sequence[Sequence[str]]

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_SEARCH_TAGS = re.compile(r"</?(?:search|tool_response)>")
_ANSWER_TAGS = re.compile(r"</?answer>")
_SEARCH_CYCLE = ("<search>", "</search>", "<tool_response>", "</tool_response>")
_MEM_OPEN = "<mem>"
_MEM_CLOSE = "</mem>"
_MULTI_ANSWER_SEPARATOR = ";"


class FormatRule(StrEnum):
    """The eight format rules, in the order :func:`validate_format` checks them."""

    THINK_BALANCED = "think_balanced"
    ANSWER_BALANCED = "answer_balanced"
    SEARCH_BALANCED = "search_balanced"
    MEM_BALANCED = "mem_balanced"
    TURN_OPENS_WITH_MEM = "turn_opens_with_mem"
    TURN_HAS_THINK = "turn_has_think"
    SEARCH_THEN_TOOL_RESPONSE = "search_then_tool_response"
    ANSWER_IN_FINAL_TURN = "answer_in_final_turn"


def normalize_answer(text: str) -> str:
    """Lower-case, delete ASCII punctuation, replace the words a / an / the with a space and
    collapse white space (the SQuAD normalisation).

    ``"The United States of America!"`` becomes ``"united states of america"``.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_answer: text must be a string, got {type(text).__name__}")
    without_punctuation = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", without_punctuation).split())


def em_check(prediction: str, golden_answers: str | Sequence[str]) -> int:
    """1 if the normalised ``prediction`` equals any normalised golden answer, else 0.

    A bare string is one golden answer.
    """
    answers = _aliases(golden_answers, "golden_answers")
    normalized = normalize_answer(prediction)
    return int(any(normalize_answer(answer) == normalized for answer in answers))


def split_turns(response: Response) -> tuple[str, ...]:
    """The turns of a response: a sequence is taken as is, a flat string is cut before every ``<mem>``."""
    if isinstance(response, str):
        starts = [match.start() for match in re.finditer(re.escape(_MEM_OPEN), response)]
        if not starts or response[: starts[0]].strip():
            starts = [0, *starts]
        bounds = [*starts, len(response)]
        return tuple(response[begin:end] for begin, end in pairwise(bounds))
    if not isinstance(response, Sequence):
        raise TypeError(f"response must be a string or a sequence of turn strings, got {type(response).__name__}")
    for index, turn in enumerate(response):
        if not isinstance(turn, str):
            raise TypeError(f"response turn {index} must be a string, got {type(turn).__name__}")
    return tuple(response)


def extract_solution(response: Response) -> str | None:
    """The stripped content of the last ``<answer>…</answer>`` of the response; None when there is none.

    Pass the response only: an answer tag quoted in the prompt would otherwise count.
    """
    text = "\n".join(split_turns(response))
    answers = _ANSWER_BLOCK.findall(text)
    return answers[-1].strip() if answers else None


def format_violations(response: Response) -> tuple[FormatRule, ...]:
    """Every format rule the response breaks, in rule order (empty when the format is valid)."""
    turns = split_turns(response)
    return tuple(rule for rule, holds in _CHECKS if not holds(turns))


def validate_format(response: Response) -> tuple[bool, FormatRule | None]:
    """``(True, None)`` when the response keeps all eight rules, else ``(False, first broken rule)``.

    1. ``<think>``/``</think>`` equal in number and present at least once;
    2. ``<answer>``/``</answer>`` likewise;
    3. ``<search>``/``</search>`` likewise: a response that answers without searching fails;
    4. ``<mem>``/``</mem>`` equal in number;
    5. every turn, the last included, opens with a complete ``<mem>…</mem>`` block;
    6. every turn holds a ``<think>…</think>`` block;
    7. within each turn the tags run ``<search>…</search><tool_response>…</tool_response>``, as
       many times as it searches, never a tool response first and never a search left unanswered;
    8. answer tags appear in the final turn only, each ``<answer>`` before its ``</answer>``.
    """
    violations = format_violations(response)
    return (False, violations[0]) if violations else (True, None)


def compute_score(response: Response, target: Target) -> float:
    """The outcome score of a response, in [0, 1].

    0 when the format is invalid or there is no answer. Otherwise, by the target's type:
    a string is one answer (exact match); a list of strings holds aliases of one answer (1 if any
    matches); a list of lists holds the aliases of several answers given at once, the response's
    answer being split on ``;`` and matched part by part in order; the score is the fraction of
    parts matched.
    """
    kind = _target_kind(target)
    if not validate_format(response)[0]:
        return 0.0
    answer = extract_solution(response)
    if answer is None:
        return 0.0
    if kind == "multi":
        targets: Sequence[Sequence[str]] = target
        parts = answer.split(_MULTI_ANSWER_SEPARATOR)
        # an answer with too few or too many parts scores only the parts it lines up with
        matched = sum(em_check(part, aliases) for part, aliases in zip(parts, targets, strict=False))
        return matched / len(targets)
    return float(em_check(answer, target))  # type: ignore[arg-type]


def _aliases(golden_answers: str | Sequence[str], field: str) -> tuple[str, ...]:
    if isinstance(golden_answers, str):
        return (golden_answers,)
    if not isinstance(golden_answers, Sequence) or not golden_answers:
        raise ValueError(f"{field} must be a string or a non-empty sequence of strings, got {golden_answers!r}")
    for answer in golden_answers:
        if not isinstance(answer, str):
            raise ValueError(f"{field} must hold strings only, got {answer!r}")
    return tuple(golden_answers)


def _target_kind(target: Target) -> str:
    if isinstance(target, str):
        return "single"
    if not isinstance(target, Sequence) or not target:
        raise ValueError(
            f"target must be a string, a non-empty list of strings or a non-empty list of lists, got {target!r}"
        )
    if all(isinstance(item, str) for item in target):
        return "aliases"
    if all(not isinstance(item, str) for item in target):
        for index, item in enumerate(target):
            _aliases(item, f"target[{index}]")
        return "multi"
    raise ValueError(f"target mixes strings and lists: {target!r}")


def _equal_and_present(tag: str, required: bool) -> Callable[[tuple[str, ...]], bool]:
    def holds(turns: tuple[str, ...]) -> bool:
        text = "\n".join(turns)
        opened, closed = text.count(f"<{tag}>"), text.count(f"</{tag}>")
        return opened == closed and (opened > 0 or not required)

    return holds


def _opens_with_mem(turns: tuple[str, ...]) -> bool:
    for turn in turns:
        head = turn.lstrip()
        if not head.startswith(_MEM_OPEN) or _MEM_CLOSE not in head[len(_MEM_OPEN) :]:
            return False
    return bool(turns)


def _has_think(turns: tuple[str, ...]) -> bool:
    return bool(turns) and all(_THINK_BLOCK.search(turn) for turn in turns)


def _searches_answered(turns: tuple[str, ...]) -> bool:
    for turn in turns:
        tags = tuple(_SEARCH_TAGS.findall(turn))
        cycles, rest = divmod(len(tags), len(_SEARCH_CYCLE))
        if rest or tags != _SEARCH_CYCLE * cycles:
            return False
    return True


def _answer_in_final_turn(turns: tuple[str, ...]) -> bool:
    if not turns:
        return True
    if any(_ANSWER_TAGS.search(turn) for turn in turns[:-1]):
        return False
    tags = _ANSWER_TAGS.findall(turns[-1])
    return len(tags) % 2 == 0 and all(tag == ("<answer>" if i % 2 == 0 else "</answer>") for i, tag in enumerate(tags))


_CHECKS: tuple[tuple[FormatRule, Callable[[tuple[str, ...]], bool]], ...] = (
    (FormatRule.THINK_BALANCED, _equal_and_present("think", required=True)),
    (FormatRule.ANSWER_BALANCED, _equal_and_present("answer", required=True)),
    (FormatRule.SEARCH_BALANCED, _equal_and_present("search", required=True)),
    (FormatRule.MEM_BALANCED, _equal_and_present("mem", required=False)),
    (FormatRule.TURN_OPENS_WITH_MEM, _opens_with_mem),
    (FormatRule.TURN_HAS_THINK, _has_think),
    (FormatRule.SEARCH_THEN_TOOL_RESPONSE, _searches_answered),
    (FormatRule.ANSWER_IN_FINAL_TURN, _answer_in_final_turn),
)
