"""Featurisation: a pure function from (context, candidates, usage statistics, similarity) to rows.

Action features (one row per candidate, numbers keyed by name):

========================  ==================================================================
``lex``, ``sem``          BM25 score and embedding cosine of the candidate text to the query
``lex_z``, ``sem_z``      the same, z-normalised among candidates of the same kind
``lex_rr``, ``sem_rr``    reciprocal rank ``1 / (1 + rank)`` among the same kind (rank 0 = best)
``hyb_z``                 ``lex_z + sem_z`` (``lex_z`` alone without embeddings): the prior
``hyb_rr``, ``hyb_top``   reciprocal rank by ``hyb_z``; 1 for the best of its kind
``hyb_gap``               ``hyb_z`` minus the best other ``hyb_z`` of the kind (> 0 only for the leader)
``tokens_log``            ``ln(1 + tokens)``
``tokens_share``          tokens / budget tokens (0 without a token limit)
``age_log_days``          ``ln(1 + age in days)`` from ``Candidate.created_at``; ``age_known`` 0/1
``chosen_log``            ``ln(1 + times_chosen)``; ``helped_log`` likewise for ``times_helped``
``helped_rate``           ``(times_helped + 1) / (times_chosen + 2)`` (a Beta(1, 1) posterior mean)
``fresh``                 1 when the candidate was never chosen
``failed_here``           ``ln(1 + times)`` the candidate was chosen for this same request and did not help
``helped_here``           ``ln(1 + times)`` it helped this same request
``kind=<k>``, ``source=<s>``  one-hot categoricals (source from metadata, ``unknown`` if absent)
========================  ==================================================================

Context features (:func:`context_features`): ``q=<token>`` counts of the query's tokens, ``user=<id>``,
``turn_log`` and ``kinds=<k>`` for every kind requested. Learners hash these; nothing here is learned.

Usage statistics come from ``Candidate.usage`` (a :class:`~memabra.CandidateStats` the runtime fills
from the episode log; ``None`` counts as never chosen); an explicit ``stats`` mapping overrides them.
The same counts for this request alone (``request``: a router's memory of the outcomes of the same
user asking the same thing, :meth:`memabra.router.Router.featurize`) give ``failed_here`` and
``helped_here``; both are 0 for a request never seen, and in feature rows logged before they existed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError
from memabra._records import Budget, Candidate, CandidateKind, CandidateStats, RoutingContext
from memabra.router._similarity import Similarity
from memabra.router._text import analyze

__all__ = [
    "HISTORY_FEATURES",
    "NUMERIC_FEATURES",
    "CandidateStats",
    "FeatureTable",
    "context_features",
    "featurize",
    "recall",
]

SIMILARITY_FEATURES: tuple[str, ...] = (
    "lex",
    "lex_z",
    "lex_rr",
    "sem",
    "sem_z",
    "sem_rr",
    "hyb_z",
    "hyb_rr",
    "hyb_top",
    "hyb_gap",
)
# usage history and cost: what the learners keep apart from the similarity features
HISTORY_FEATURES: tuple[str, ...] = (
    "tokens_log",
    "tokens_share",
    "age_log_days",
    "age_known",
    "chosen_log",
    "helped_log",
    "helped_rate",
    "fresh",
    "failed_here",
    "helped_here",
)
NUMERIC_FEATURES: tuple[str, ...] = SIMILARITY_FEATURES + HISTORY_FEATURES
# a learner reads columns by name several times a slot
_COLUMN_OF = {name: j for j, name in enumerate(NUMERIC_FEATURES)}

# added after logs were first written: a stored row without them had no request history
_DEFAULT_ZERO = frozenset({"failed_here", "helped_here"})


@dataclass(frozen=True, slots=True)
class FeatureTable:
    """Feature rows aligned with ``candidates``: ``matrix[i, j]`` is ``NUMERIC_FEATURES[j]`` of
    candidate ``i``; ``rows[i]`` holds the same numbers plus the one-hot categoricals by name."""

    candidates: tuple[Candidate, ...]
    matrix: NDArray[np.float64]
    rows: tuple[Mapping[str, float], ...]

    def __post_init__(self) -> None:
        if self.matrix.shape != (len(self.candidates), len(NUMERIC_FEATURES)):
            raise RouterError(
                f"FeatureTable.matrix has shape {self.matrix.shape}, expected "
                f"({len(self.candidates)}, {len(NUMERIC_FEATURES)})"
            )
        if len(self.rows) != len(self.candidates):
            raise RouterError(f"FeatureTable.rows has {len(self.rows)} rows for {len(self.candidates)} candidates")
        if not np.all(np.isfinite(self.matrix)):
            bad_row, bad_col = np.argwhere(~np.isfinite(self.matrix))[0]
            raise RouterError(
                f"feature {NUMERIC_FEATURES[bad_col]!r} of candidate {self.candidates[bad_row].id!r} is not finite"
            )

    def column(self, name: str) -> NDArray[np.float64]:
        return self.matrix[:, _COLUMN_OF[name]]

    def read_only(self) -> FeatureTable:
        """This table over a read-only view of its matrix: a router cannot change its input."""
        if not self.matrix.flags.writeable:
            return self
        matrix = self.matrix.view()
        matrix.flags.writeable = False
        return FeatureTable(self.candidates, matrix, self.rows)

    def subset(self, indices: Sequence[int]) -> FeatureTable:
        idx = list(indices)
        if idx == list(range(len(self.candidates))):
            return self  # immutable: nothing to copy
        return FeatureTable(tuple(self.candidates[i] for i in idx), self.matrix[idx], tuple(self.rows[i] for i in idx))

    @classmethod
    def from_rows(cls, candidates: Sequence[Candidate], rows: Sequence[Mapping[str, float]]) -> FeatureTable:
        """Rebuild a table from stored feature mappings (e.g. ``Selection.offered``); missing numeric
        features are an error, since a learner would silently read them as zero."""
        if len(candidates) != len(rows):
            raise RouterError(f"{len(rows)} stored feature rows for {len(candidates)} candidates")
        matrix = _plain_matrix(rows)
        if matrix is None:  # something is missing or not a finite number: find it and name it
            matrix = _checked_matrix(candidates, rows)
        frozen = []
        for row in rows:
            full = dict(row)
            for name in _DEFAULT_ZERO.difference(full):
                full[name] = 0.0
            frozen.append(MappingProxyType(full))
        return cls(tuple(candidates), matrix, tuple(frozen))


# what a stored row holds where a feature is missing: 0.0 for the features added after logs were
# first written, a marker for the rest (a missing one is an error, found by the checked path)
_MISSING = object()
_ROW_DEFAULTS = tuple((name, 0.0 if name in _DEFAULT_ZERO else _MISSING) for name in NUMERIC_FEATURES)


def _plain_matrix(rows: Sequence[Mapping[str, float]]) -> NDArray[np.float64] | None:
    """The numeric matrix of ``rows`` when every value is present, a plain int or float and finite;
    ``None`` otherwise. One pass over the values and one vectorised check: a replayed log rebuilds
    tables of hundreds of thousands of values, where a check call per value dominated."""
    flat = [row.get(name, default) for row in rows for name, default in _ROW_DEFAULTS]
    if not set(map(type, flat)) <= {float, int}:  # bool, None, str, numpy scalars, the marker
        return None
    matrix = np.array(flat, dtype=np.float64).reshape(len(rows), len(NUMERIC_FEATURES))
    return matrix if bool(np.isfinite(matrix).all()) else None


def _checked_matrix(candidates: Sequence[Candidate], rows: Sequence[Mapping[str, float]]) -> NDArray[np.float64]:
    """The numeric matrix of ``rows``, value by value, raising on the first value that is missing,
    not a number or not finite."""
    matrix = np.zeros((len(candidates), len(NUMERIC_FEATURES)), dtype=np.float64)
    for i, (candidate, row) in enumerate(zip(candidates, rows, strict=True)):
        for j, name in enumerate(NUMERIC_FEATURES):
            if name not in row:
                if name in _DEFAULT_ZERO:
                    continue
                raise RouterError(f"stored features of candidate {candidate.id!r} lack {name!r}")
            matrix[i, j] = _finite(row[name], f"feature {name!r} of candidate {candidate.id!r}")
    return matrix


def _finite(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise RouterError(f"{what} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise RouterError(f"{what} is not finite ({number!r})")
    return number


def _zscore(values: NDArray[np.float64]) -> NDArray[np.float64]:
    if values.size < 2:
        return np.zeros_like(values)
    sd = float(values.std())
    if sd < 1e-12:
        return np.zeros_like(values)
    scores: NDArray[np.float64] = (values - values.mean()) / sd
    return scores


def _reciprocal_rank(values: NDArray[np.float64]) -> NDArray[np.float64]:
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.arange(values.size, dtype=np.float64)
    return 1.0 / (1.0 + ranks)


def similarity_columns(
    lexical: NDArray[np.float64], semantic: NDArray[np.float64], has_semantic: bool
) -> dict[str, NDArray[np.float64]]:
    """The similarity-derived columns of one kind's candidates from their raw scores."""
    lex_z = _zscore(lexical)
    sem_z = _zscore(semantic) if has_semantic else np.zeros(lexical.size)
    hyb = lex_z + sem_z
    rr = _reciprocal_rank(hyb)
    gap = np.zeros(lexical.size)
    if lexical.size > 1:
        top_two = np.sort(hyb)[-2:]
        gap = hyb - np.where(hyb >= top_two[1], top_two[0], top_two[1])
    return {
        "lex": lexical,
        "sem": semantic,
        "lex_z": lex_z,
        "sem_z": sem_z,
        "lex_rr": _reciprocal_rank(lexical),
        "sem_rr": _reciprocal_rank(semantic) if has_semantic else np.zeros(lexical.size),
        "hyb_z": hyb,
        "hyb_rr": rr,
        "hyb_top": (rr == 1.0).astype(np.float64),
        "hyb_gap": gap,
    }


def featurize(
    context: RoutingContext,
    candidates: Sequence[Candidate],
    stats: Mapping[str, CandidateStats] | None = None,
    similarity: Similarity | None = None,
    *,
    budget: Budget | None = None,
    now: datetime | None = None,
    request: Mapping[str, CandidateStats] | None = None,
) -> FeatureTable:
    """Feature rows for ``candidates`` under ``context`` (see the module docstring for the names).

    Pure: the same arguments give the same table. ``similarity`` defaults to BM25 only; ``now``
    (for ages) defaults to the newest ``created_at`` in the pool so the result does not depend on
    the clock; ``budget`` defaults to ``context.budget``; ``request`` holds, by candidate id, how
    often a candidate was chosen for this same request and how often it helped there.
    """
    candidates = tuple(candidates)
    similarity = similarity if similarity is not None else Similarity()
    budget = budget if budget is not None else context.budget
    n = len(candidates)
    matrix = np.zeros((n, len(NUMERIC_FEATURES)), dtype=np.float64)
    col = {name: j for j, name in enumerate(NUMERIC_FEATURES)}
    texts = [c.text for c in candidates]
    lexical = similarity.lexical(context.query, texts) if n else np.zeros(0)
    semantic = similarity.semantic(context.query, texts) if n else np.zeros(0)

    kinds = np.array([c.kind.value for c in candidates])
    for kind in CandidateKind:
        idx = np.flatnonzero(kinds == kind.value)
        if idx.size == 0:
            continue
        for name, values in similarity_columns(lexical[idx], semantic[idx], similarity.has_semantic).items():
            matrix[idx, col[name]] = values

    ages = []
    for i, candidate in enumerate(candidates):
        usage = stats[candidate.id] if stats is not None and candidate.id in stats else candidate.usage
        chosen, helped = (usage.times_chosen, usage.times_helped) if usage is not None else (0, 0)
        if helped > chosen:
            raise RouterError(f"candidate {candidate.id!r} helped {helped} times but was chosen only {chosen} times")
        matrix[i, col["tokens_log"]] = math.log1p(candidate.tokens)
        if budget.max_tokens:
            matrix[i, col["tokens_share"]] = candidate.tokens / budget.max_tokens
        matrix[i, col["chosen_log"]] = math.log1p(chosen)
        matrix[i, col["helped_log"]] = math.log1p(helped)
        matrix[i, col["helped_rate"]] = (helped + 1.0) / (chosen + 2.0)
        matrix[i, col["fresh"]] = 1.0 if chosen == 0 else 0.0
        if request is not None and candidate.id in request:
            here = request[candidate.id]
            if here.times_helped > here.times_chosen:
                raise RouterError(
                    f"candidate {candidate.id!r} helped this request more often than it was chosen for it"
                )
            matrix[i, col["failed_here"]] = math.log1p(here.times_chosen - here.times_helped)
            matrix[i, col["helped_here"]] = math.log1p(here.times_helped)
        ages.append(candidate.created_at)

    known = [a for a in ages if a is not None]
    reference = now if now is not None else (max(known) if known else None)
    for i, created in enumerate(ages):
        if created is not None and reference is not None:
            days = max((reference - created).total_seconds() / 86400.0, 0.0)
            matrix[i, col["age_log_days"]] = math.log1p(days)
            matrix[i, col["age_known"]] = 1.0

    rows = []
    for i, candidate in enumerate(candidates):
        row = {name: float(matrix[i, j]) for j, name in enumerate(NUMERIC_FEATURES)}
        row[f"kind={candidate.kind.value}"] = 1.0
        row[f"source={candidate.metadata.get('source', 'unknown')}"] = 1.0
        rows.append(MappingProxyType(row))
    return FeatureTable(candidates, matrix, tuple(rows))


def context_features(context: RoutingContext) -> dict[str, float]:
    """Hashed-by-name context features: query tokens, user, turn and requested kinds."""
    features: dict[str, float] = {}
    for token in analyze(context.query):
        key = f"q={token}"
        features[key] = features.get(key, 0.0) + 1.0
    features[f"user={context.user_id}"] = 1.0
    features["turn_log"] = math.log1p(context.turn)
    for kind in context.kinds:
        features[f"kinds={kind.value}"] = 1.0
    return features


def recall(table: FeatureTable, limit_per_kind: int | None) -> tuple[int, ...]:
    """Indices of the ``limit_per_kind`` best candidates of each kind by the hybrid prior, in
    their original order (all of them when the limit is ``None``)."""
    if limit_per_kind is None:
        return tuple(range(len(table.candidates)))
    hyb = table.column("hyb_z")
    keep: list[int] = []
    for kind in CandidateKind:
        idx = [i for i, c in enumerate(table.candidates) if c.kind is kind]
        idx.sort(key=lambda i: -hyb[i])
        keep.extend(idx[:limit_per_kind])
    return tuple(sorted(keep))
