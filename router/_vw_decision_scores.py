"""One Vowpal Wabbit prediction per decision instead of one per slot.

With the default interactions (``qa``, ``ua``, ``uw``, ``kt``) a candidate's score is linear in
three groups of features that need not be formatted as text for every slot:

* the numeric features (namespaces ``h`` and ``p``: usage history, similarity and the open-rank
  features ``rem_rr``, ``rem_gap``, ``rem_top``), which enter no interaction: they add
  ``features @ weights``;
* the slot's kind and position (namespace ``k``), which reach a candidate only through the ``kt``
  interaction with its type (namespace ``t``: kind and source): they add ``shift[type, position]``;
* everything else (``a``, ``w``, ``t`` and the request's ``q`` and ``u``), the same at every slot
  of a decision.

VW's ``--cb_adf`` regressor is linear and the features of a shared line count as if every action
line held them, so one example per decision scores every candidate of every kind on the last group
alone, and the weights and shifts are read off VW in the same prediction: probe actions with each
numeric feature raised by one (:data:`~memabra.router._vw_examples.NUMERIC_PROBES`) and probe
actions carrying a type without and with each position's ``k`` namespace
(:func:`~memabra.router._vw_examples.position_probes`). A candidate's residual at any slot is then

    score + features @ weights + shift[type, position]

with the open-rank features of that slot; the stop option's does not depend on the slot (it has no
``t`` namespace, and the shared namespaces enter it through no linear term). So a decision parses
and predicts one example of short lines instead of one full example per slot, and formats no
numbers. The residuals agree with per-slot predictions to VW's float32 precision and the rounding
of its text format (tested against them).

This holds only for the example layout and interactions above; :func:`slot_invariant` says whether a
router's settings keep it, and the router predicts every slot when they do not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from memabra.router._features import NUMERIC_FEATURES
from memabra.router._vw_examples import MAX_POSITION, NUMERIC_PROBES, STOP_LINE, TableLines, position_probes

__all__ = ["DecisionScores", "slot_invariant"]


def slot_invariant(interactions: Sequence[str], ignore: str, ignore_linear: str, extra_args: str) -> bool:
    """Whether one prediction per decision plus the linear corrections reproduces per-slot
    predictions: the position features reach candidates only through ``kt`` and never linearly,
    the numeric features (``h``, ``p``) enter no interaction, and no extra VW option (``--nn``,
    ``--cubic``, ...) makes the model non-linear."""
    if extra_args.strip():
        return False
    if "k" not in ignore and "k" not in ignore_linear:
        return False
    for pair in interactions:
        if "k" in pair and "k" not in ignore and sorted(pair) != ["k", "t"]:
            return False
        if any(namespace in pair and namespace not in ignore for namespace in "hp"):
            return False
    return True


@dataclass(frozen=True, slots=True)
class DecisionScores:
    """VW's residuals for every candidate of a decision and the terms that carry them to any slot
    (see the module docstring). Arrays are indexed by the decision's table rows."""

    # (position, row): the residual without its open-rank terms, plus rem_gap's weight times hyb_z
    # (rem_gap is hyb_z less the best open one's, so a slot subtracts only the latter)
    fixed: NDArray[np.float64]
    negative_hybrid: NDArray[np.float64]
    rank_weights: tuple[float, float, float]
    rr_terms: NDArray[np.float64]  # rem_rr's weight times 1 / (1 + rank), by rank
    stop: float

    @classmethod
    def predict(
        cls,
        predict_lines: Callable[[list[str]], NDArray[np.float64]],
        context_line: str,
        lines: TableLines,
        matrix: NDArray[np.float64],
    ) -> DecisionScores:
        """Scores from one prediction: ``context_line`` is the shared line without a slot's ``k``
        namespace; ``lines`` holds each table row's action line without numeric features
        (:func:`~memabra.router._vw_examples.identity_lines`) and ``matrix`` its numeric features.
        The candidates are scored without ``k`` or numeric features; each type's probes (one
        without ``k``, one per position) and the numeric probes give what those features add."""
        type_of: dict[tuple[str, str], int] = {}
        type_index = [type_of.setdefault(key, len(type_of)) for key in zip(lines.kinds, lines.types, strict=True)]
        probes = []
        for kind, type_line in type_of:
            probes.append(type_line)
            probes += position_probes(kind, type_line)
        n = len(lines.lines)
        scores = predict_lines([context_line, *lines.lines, *probes, *NUMERIC_PROBES, STOP_LINE])
        type_scores = scores[n : n + len(probes)].reshape(len(type_of), MAX_POSITION + 2)
        shifts = type_scores[:, 1:] - type_scores[:, :1]
        numeric = scores[n + len(probes) : n + len(probes) + len(NUMERIC_PROBES)]
        weights = numeric[1:] - numeric[0]  # NUMERIC_FEATURES, then rem_rr, rem_gap, rem_top
        features = len(NUMERIC_FEATURES)
        rr_weight, gap_weight, top_weight = (float(w) for w in weights[features:])
        hybrid = matrix[:, NUMERIC_FEATURES.index("hyb_z")]
        fixed = (scores[:n] + matrix @ weights[:features] + gap_weight * hybrid) + shifts[type_index].T
        rr_terms = rr_weight / np.arange(1.0, n + 1.0)
        return cls(fixed, -hybrid, (rr_weight, gap_weight, top_weight), rr_terms, float(scores[-1]))

    def residuals(self, eligible: Sequence[int], position: int) -> NDArray[np.float64]:
        """Residuals of the ``eligible`` rows and the stop option at the kind's ``position``."""
        rows = list(eligible)
        _, gap_weight, top_weight = self.rank_weights
        open_scores = self.negative_hybrid[rows]
        order = open_scores.argsort(kind="stable")
        leader = int(order[0])
        best = -float(open_scores[leader])
        out = np.empty(len(rows) + 1)
        body = out[:-1]
        # rem_rr, rem_gap and rem_top as slot_example() writes them, times their weights
        np.subtract(self.fixed[min(position, MAX_POSITION), rows], gap_weight * best, out=body)
        body[order] += self.rr_terms[: len(rows)]
        if len(rows) > 1:
            body[leader] += gap_weight * (best + float(open_scores[order[1]]))
        body[leader] += top_weight
        out[-1] = self.stop
        return out
