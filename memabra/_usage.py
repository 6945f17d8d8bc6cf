"""Which injected candidates a turn used: its local outcomes.

A chosen memory or skill counts as *used* when the answer carries words of it that the question did
not; a chosen tool when it was called successfully. A used memory in an answer that is not itself a
question counts as *useful reuse* (the reward's U).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memabra._catalog import Skill
from memabra._records import CandidateKind, Selection, Step, StepKind
from memabra._text import content_words

__all__ = ["Usage", "detect_usage"]

# A memory or skill is used when the answer carries this share of its novel words (at least 1, at most 3).
_SHARE_OF_NOVEL_WORDS = 0.3
_MAX_WORDS_NEEDED = 3
# an answer ending in one asks the user back: Latin, full-width (Chinese, Japanese) and Arabic
_QUESTION_MARKS = ("?", "\uff1f", "\u061f")


@dataclass(frozen=True, slots=True)
class Usage:
    used: frozenset[str]
    useful: frozenset[str]


def tool_name(candidate_id: str, metadata: Mapping[str, object]) -> str:
    return str(metadata.get("name", candidate_id.removeprefix("tool:")))


def detect_usage(
    selection: Selection, steps: Sequence[Step], query: str, answer: str, skills: Mapping[str, Skill]
) -> Usage:
    answer_words = content_words(answer)
    query_words = content_words(query)
    called_ok = {s.name for s in steps if s.kind is StepKind.TOOL and s.status == "ok"}
    used: set[str] = set()
    for cand in selection.chosen:
        if cand.kind is CandidateKind.TOOL:
            if tool_name(cand.id, cand.metadata) in called_ok:
                used.add(cand.id)
            continue
        source = skills[cand.id].body if cand.id in skills else cand.text
        novel = content_words(source) - query_words
        hits = novel & answer_words
        if novel and len(hits) >= max(1, min(_MAX_WORDS_NEEDED, math.ceil(_SHARE_OF_NOVEL_WORDS * len(novel)))):
            used.add(cand.id)
    asks_back = answer.rstrip().endswith(_QUESTION_MARKS)
    memories = {c.id for c in selection.chosen if c.kind is CandidateKind.MEMORY}
    useful = frozenset() if asks_back else frozenset(used & memories)
    return Usage(frozenset(used), useful)
