"""Vowpal Wabbit text-format examples for one slot decision (pure functions).

Namespaces (VW keys interactions on a namespace's first letter):

=====  ======================================================================================
``q``  shared: the query's tokens
``u``  shared: the user id
``k``  shared: the slot's kind and its position within the kind (``pos_0`` .. ``pos_4+``)
``a``  action: the candidate id (so the policy can learn per-candidate value)
``w``  action: the first tokens of the candidate text
``h``  action: usage history and cost features (``helped_rate``, ``chosen_log``, ``tokens_log``, ...)
``p``  action: similarity features (``lex_z``, ``hyb_rr``, ...) plus ``rem_rr``, ``rem_top`` and
       ``rem_gap`` -- the hybrid prior's rank among the options still open
``t``  action: kind and source one-hots
``s``  the stop option's only namespace
=====  ======================================================================================

The default interactions are ``qa`` (query token × candidate: which candidate serves which
request, beyond similarity), ``ua`` (user × candidate), ``uw`` (user × candidate words: a user's
preference for, say, brief notes carries over to notes it has not seen) and ``kt`` (slot position ×
candidate kind: a fifth memory is worth less than a first, which is how the router learns to inject
fewer; without it the memory bench file's last-pass tokens stayed near the hybrid top-5's).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from memabra._records import RoutingContext
from memabra.router._features import HISTORY_FEATURES, NUMERIC_FEATURES, FeatureTable, similarity_columns
from memabra.router._text import analyze, vw_token

__all__ = [
    "MAX_POSITION",
    "NUMERIC_PROBES",
    "STOP_LINE",
    "TableLines",
    "candidate_lines",
    "context_line",
    "identity_lines",
    "label_line",
    "numeric_features",
    "position_namespace",
    "position_probes",
    "shared_line",
    "slot_example",
    "type_namespace",
]

STOP_LINE = "|s stop"
MAX_POSITION = 4


@lru_cache(maxsize=4096)
def _query_namespace(query: str) -> str:
    return " ".join(vw_token(t) for t in analyze(query))


def context_line(context: RoutingContext) -> str:
    """The shared line without the slot's kind and position: the request alone."""
    return f"shared |q {_query_namespace(context.query)} |u {vw_token(context.user_id)}"


def shared_line(context: RoutingContext, kind: str, position: int) -> str:
    return f"{context_line(context)} {position_namespace(kind, position)}"


def position_namespace(kind: str, position: int) -> str:
    """The ``k`` namespace of a slot: its kind and the kind's position (capped at MAX_POSITION)."""
    pos = min(position, MAX_POSITION)
    return f"|k kind_{kind} pos_{pos} kp_{kind}_{pos}"


@lru_cache(maxsize=1024)
def type_namespace(kind: str, source: str) -> str:
    """The ``t`` namespace of a candidate of ``kind`` from ``source``."""
    return f"|t kind_{kind} src_{vw_token(source)}"


def position_probes(kind: str, type_line: str) -> list[str]:
    """Action lines carrying one candidate type and the ``k`` namespace of each position
    ``0 .. MAX_POSITION`` of ``kind``: two of them differ in score by exactly what the ``kt``
    interaction adds when a candidate of that type moves between those positions."""
    return [f"{type_line} {position_namespace(kind, p)}" for p in range(MAX_POSITION + 1)]


_HISTORY = frozenset(HISTORY_FEATURES)

# A base line, then one line per numeric feature (``h`` and ``p``: NUMERIC_FEATURES in order, then
# rem_rr, rem_gap, rem_top) raised by one: the score differences are the features' linear weights
# (these namespaces enter no interaction by default).
NUMERIC_PROBES = (
    "|p rem_rr:1",
    *(f"|p rem_rr:1 |h {name}:1" if name in _HISTORY else f"|p rem_rr:1 {name}:1" for name in NUMERIC_FEATURES),
    "|p rem_rr:2",
    "|p rem_rr:1 rem_gap:1",
    "|p rem_rr:1 rem_top:1",
)
_HISTORY_COLUMNS = tuple(j for j, n in enumerate(NUMERIC_FEATURES) if n in _HISTORY)
_SIMILARITY_COLUMNS = tuple(j for j, n in enumerate(NUMERIC_FEATURES) if n not in _HISTORY)
_history_of = itemgetter(*_HISTORY_COLUMNS)
_similarity_of = itemgetter(*_SIMILARITY_COLUMNS)
_SIMILARITY_FORMAT = " ".join(f"{NUMERIC_FEATURES[j]}:%.5g" for j in _SIMILARITY_COLUMNS)


def _namespace(row: Sequence[float], columns: tuple[int, ...]) -> str:
    # plain floats: formatting numpy scalars one by one was a third of a decision's time
    return " ".join(f"{NUMERIC_FEATURES[j]}:{row[j]:.5g}" for j in columns if row[j] != 0.0)


def numeric_features(row: np.ndarray) -> str:
    """The ``h`` (usage history and cost) and ``p`` (similarity) namespaces of one feature row, ``p``
    last so slot features can be appended to it; zeros are left out, as VW would."""
    values = row.tolist()
    return f"|h {_namespace(values, _HISTORY_COLUMNS)} |p {_namespace(values, _SIMILARITY_COLUMNS)}"


@lru_cache(maxsize=65536)
def _identity_part(candidate_id: str, text: str, type_line: str, text_tokens: int) -> str:
    words = " ".join(vw_token(t) for t in analyze(text)[:text_tokens])
    return f"|a {vw_token(candidate_id)} |w {words} {type_line}"


@lru_cache(maxsize=65536)
def _static_part(candidate_id: str, text: str, type_line: str, history: tuple[float, ...], text_tokens: int) -> str:
    usage = " ".join(
        f"{NUMERIC_FEATURES[j]}:{v:.5g}" for j, v in zip(_HISTORY_COLUMNS, history, strict=True) if v != 0.0
    )
    return f"{_identity_part(candidate_id, text, type_line, text_tokens)} |h {usage}"


class TableLines(NamedTuple):
    """Per table row: an action line, its ``t`` namespace and the row's kind."""

    lines: tuple[str, ...]
    types: tuple[str, ...]
    kinds: tuple[str, ...]


def identity_lines(table: FeatureTable, text_tokens: int) -> TableLines:
    """Every candidate's action line without numeric features (namespaces ``a``, ``w``, ``t``):
    what does not change between decisions."""
    lines, types, kinds = [], [], []
    for candidate in table.candidates:
        kind = candidate.kind.value
        type_line = type_namespace(kind, str(candidate.metadata.get("source", "unknown")))
        lines.append(_identity_part(candidate.id, candidate.text, type_line, text_tokens))
        types.append(type_line)
        kinds.append(kind)
    return TableLines(tuple(lines), tuple(types), tuple(kinds))


def candidate_lines(table: FeatureTable, text_tokens: int) -> tuple[str, ...]:
    """The slot-independent part of every candidate's action line, in table order."""
    lines = []
    for candidate, row in zip(table.candidates, table.matrix.tolist(), strict=True):
        type_line = type_namespace(candidate.kind.value, str(candidate.metadata.get("source", "unknown")))
        # the id, words and usage history of a candidate recur across decisions: format them once
        static = _static_part(candidate.id, candidate.text, type_line, _history_of(row), text_tokens)
        # one C-level format for the row; a 0-valued feature is one VW drops when parsing
        lines.append(f"{static} |p {_SIMILARITY_FORMAT % _similarity_of(row)}")
    return tuple(lines)


_RANK_TEXT = tuple(" rem_rr:%.5g rem_gap:" % (1.0 / (1.0 + r)) for r in range(256))


def slot_example(shared: str, lines: Sequence[str], hybrid: np.ndarray, eligible: Sequence[int]) -> list[str]:
    """The multi-line example of a slot: shared line, one line per eligible candidate with the
    prior's rank among the open options appended, then the stop option."""
    open_scores = hybrid[list(eligible)]
    order = np.argsort(-open_scores, kind="stable")
    ranks = np.empty(len(eligible), dtype=np.intp)
    ranks[order] = np.arange(len(eligible))
    leader = int(order[0])
    best = open_scores[leader]
    gaps = (open_scores - best).tolist()
    if len(eligible) > 1:
        gaps[leader] = float(best - open_scores[order[1]])
    example = [shared]
    # this runs for every open candidate at every slot: cached rank text, plain floats
    for j, (i, rank) in enumerate(zip(eligible, ranks.tolist(), strict=True)):
        rank_text = _RANK_TEXT[rank] if rank < len(_RANK_TEXT) else " rem_rr:%.5g rem_gap:" % (1.0 / (1.0 + rank))
        example.append(f"{lines[i]}{rank_text}{gaps[j]:.5g}{' rem_top:1' if j == leader else ''}")
    example.append(STOP_LINE)
    return example


def label_line(line: str, cost: float, probability: float) -> str:
    """``line`` with the contextual-bandit label ``0:cost:probability`` prepended."""
    return f"0:{cost:.9g}:{probability:.9g} {line}"


def synthetic_slot(rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """A made-up slot decision with realistic numeric features and no text or ids, for teaching a
    fresh workspace the hybrid prior. Returns the example (shared line, open candidates, stop) and
    the open candidates' ``hyb_z``."""
    n = int(rng.integers(2, 40))
    lexical = rng.gamma(1.0, 2.0, n) * (rng.random(n) < 0.7)
    semantic = rng.normal(0.2, 0.15, n)
    columns = similarity_columns(lexical, semantic, has_semantic=bool(rng.random() < 0.9))
    chosen = rng.poisson(2.0, n) * (rng.random(n) < 0.5)
    helped = rng.binomial(chosen, 0.3)
    tokens = rng.integers(5, 400, n)
    budget = float(rng.integers(200, 4000))
    age = rng.exponential(30.0, n)
    aged = rng.random(n) < 0.5
    columns |= {
        "tokens_log": np.log1p(tokens),
        "tokens_share": tokens / budget,
        "age_log_days": np.where(aged, np.log1p(age), 0.0),
        "age_known": aged.astype(np.float64),
        "chosen_log": np.log1p(chosen),
        "helped_log": np.log1p(helped),
        "helped_rate": (helped + 1.0) / (chosen + 2.0),
        "fresh": (chosen == 0).astype(np.float64),
        "failed_here": np.zeros(n),
        "helped_here": np.zeros(n),
    }
    matrix = np.column_stack([columns[name] for name in NUMERIC_FEATURES])
    kind = ("memory", "skill", "tool")[int(rng.integers(0, 3))]
    position = int(rng.integers(0, 4))
    taken = set(np.argsort(-columns["hyb_z"], kind="stable")[: min(position, n - 1)].tolist())
    eligible = [i for i in range(n) if i not in taken]
    lines = [f"|t kind_{kind} {numeric_features(row)}" for row in matrix]
    shared = f"shared |k kind_{kind} pos_{position} kp_{kind}_{position}"
    return slot_example(shared, lines, columns["hyb_z"], eligible), columns["hyb_z"][eligible]
