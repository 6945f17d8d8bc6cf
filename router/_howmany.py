"""The request-independent part of a learner's residual: how many candidates a slot is worth.

The residual of an option is ``r = r_base + r_cross``: ``r_cross`` is the subclass's model
(hashed, mostly request-specific features), ``r_base`` this one, a ridge regression on a few
dense features that mean the same for every request. With ``lead`` the ``hyb_z`` of the kind's
best pick so far (of the best open candidate before the first pick):

* a candidate: an intercept per slot kind and position, ``lead`` (how strong the slot's evidence
  is) and how far its own ``hyb_z`` lies below ``lead``;
* the stop option: an intercept per slot kind and position and how far the best open candidate
  lies below ``lead``.

Both parts are fitted by backfitting: ``r_base`` on the whole target (its exact least-squares fit
on the requests seen is what it predicts for a request never seen), ``r_cross`` on what ``r_base``
leaves. A fresh model predicts 0, so a fresh learner still ranks as hybrid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import SnapshotError
from memabra._records import CandidateKind
from memabra.router._features import FeatureTable
from memabra.router._slots import SlotView

__all__ = ["CountModel"]

_KINDS = {kind: i for i, kind in enumerate(CandidateKind)}
_POSITIONS = 5  # positions beyond the fifth pick share the last block
_BLOCKS = len(_KINDS) * _POSITIONS
_CAP = 5.0  # gaps in hyb_z units (standard deviations of the kind's similarity) beyond 5 count as 5
_LEAD = 2 * _BLOCKS
_GAP = _LEAD + 1
_STOP_GAP = _GAP + 1
WIDTH = _STOP_GAP + 1
# the ridge penalty, in squared feature units: it keeps the per-block intercepts (0/1 features,
# a few hundred examples each) near 0 and leaves the fit to the shared lead and gap slopes (whose
# features reach 5-12, so the same penalty hardly binds them); 30-300 let the memory bench's first
# pass fall 3-7 points below hybrid's (measured in docs/router.md)
RIDGE = 1000.0


class CountModel:
    """Ridge regression of the residual target on the dense features above (sufficient statistics
    ``A = sum x x^T`` and ``b = sum x t``; weights ``(A + RIDGE I)^-1 b``)."""

    __slots__ = ("_gaps_by_lead", "_gram", "_hybrid", "_moment", "_table", "_weight_values", "_weights")

    def __init__(self) -> None:
        self._gram: NDArray[np.float64] = np.zeros((WIDTH, WIDTH))
        self._moment: NDArray[np.float64] = np.zeros(WIDTH)
        self.weights = np.zeros(WIDTH)
        # features, not weights: the gap column of every row of the last table seen, by lead, and
        # its hyb_z column as Python floats
        self._table: FeatureTable | None = None
        self._gaps_by_lead: dict[float, NDArray[np.float64]] = {}
        self._hybrid: list[float] = []

    @property
    def weights(self) -> NDArray[np.float64]:
        return self._weights

    @weights.setter
    def weights(self, weights: NDArray[np.float64]) -> None:
        self._weights = weights
        # a slot reads a few single weights: Python floats are read several times faster than
        # numpy scalars, and their arithmetic is the same IEEE arithmetic
        self._weight_values: list[float] = weights.tolist()

    def _table_seen(self, table: FeatureTable) -> None:
        if self._table is not table:
            self._table = table
            self._gaps_by_lead = {}
            self._hybrid = table.column("hyb_z").tolist()

    def gaps(self, table: FeatureTable, lead: float) -> NDArray[np.float64]:
        """Every row's gap below ``lead`` (capped; shared, not to be written): a kind's slots mostly
        share one lead, so a slot gathers its rows' gaps instead of computing them."""
        self._table_seen(table)
        gaps = self._gaps_by_lead.get(lead)
        if gaps is None:
            # minimum(maximum()) is what np.clip computes, without its Python-level argument handling
            gaps = self._gaps_by_lead[lead] = np.minimum(np.maximum(lead - table.column("hyb_z"), 0.0), _CAP)
        return gaps

    def _slot_features(self, view: SlotView, top: float | None) -> tuple[int, float, float]:
        """The slot's block column, its lead and the stop option's gap."""
        block = _KINDS[view.kind] * _POSITIONS + min(view.position, _POSITIONS - 1)
        if not view.eligible:
            return block, 0.0, 0.0
        self._table_seen(view.table)
        hyb = self._hybrid
        candidates = view.table.candidates
        kind = view.kind
        picked = [hyb[i] for i in view.chosen if candidates[i].kind is kind]
        if top is None:
            top = max(hyb[i] for i in view.eligible)
        lead = max(picked) if picked else top
        return block, lead, min(max(lead - top, 0.0), _CAP)

    def rows(self, view: SlotView, top: float | None = None) -> NDArray[np.float64]:
        """The dense features of every option of ``view`` (candidates, then stop); ``top``, the
        open candidates' highest ``hyb_z`` where the caller already knows it, saves a reduction."""
        block, lead, stop_gap = self._slot_features(view, top)
        x = np.zeros((len(view.eligible) + 1, WIDTH))
        x[-1, _BLOCKS + block] = 1.0
        if not view.eligible:
            return x
        x[:-1, block] = 1.0
        x[:-1, _LEAD] = lead
        x[:-1, _GAP] = self.gaps(view.table, lead)[view.rows]
        x[-1, _STOP_GAP] = stop_gap
        return x

    def predict(self, view: SlotView, top: float | None = None) -> NDArray[np.float64]:
        """``r_base`` of every option of ``view`` (candidates, then stop); ``top`` as for :meth:`rows`.

        Written out term by term rather than as ``rows(view) @ weights``: a matrix product's last
        bit can depend on a row's place in the matrix, and a candidate's prediction must not
        (the offer scores read a kind's first slot from the whole table)."""
        lead, gap_weight, shift, stop = self.slot_terms(view, top)
        out = np.empty(len(view.eligible) + 1)
        out[-1] = stop
        if view.eligible:
            head = out[:-1]
            self.gaps(view.table, lead).take(view.rows, out=head)
            head *= gap_weight
            head += shift
        return out

    def slot_terms(self, view: SlotView, top: float | None = None) -> tuple[float, float, float, float]:
        """:meth:`predict` in parts, for a caller that sums the rows' terms over a whole table:
        ``(lead, gap weight, shift, stop)``, each open candidate's ``r_base`` being its gap below
        ``lead`` (:meth:`gaps`) times the gap weight plus ``shift``, the stop option's ``stop``."""
        block, lead, stop_gap = self._slot_features(view, top)
        w = self._weight_values
        stop = w[_BLOCKS + block] + stop_gap * w[_STOP_GAP]
        return lead, w[_GAP], w[block] + lead * w[_LEAD], stop

    def fit(self, view: SlotView, option: int, target: float) -> float:
        """Add one example (``option`` indexes ``view``'s options); returns what the refitted
        ``r_base`` leaves of ``target``."""
        x = self.rows(view)[option]
        self._gram += np.outer(x, x)
        self._moment += target * x
        self.weights = np.asarray(np.linalg.solve(self._gram + RIDGE * np.eye(WIDTH), self._moment), dtype=np.float64)
        return target - float(self.weights @ x)

    # ------------------------------------------------------------------------- snapshots
    def state(self) -> dict[str, Any]:
        """JSON state: the upper triangle of ``A`` and ``b``."""
        upper = np.triu_indices(WIDTH)
        return {"gram": self._gram[upper].tolist(), "moment": self._moment.tolist()}

    def restore(self, state: Any) -> None:
        """Inverse of :meth:`state`; ``None`` (a snapshot from before this model) restores it empty."""
        if state is None:
            state = CountModel().state()
        upper = np.triu_indices(WIDTH)
        try:
            gram = np.asarray(state["gram"], dtype=np.float64)
            moment = np.asarray(state["moment"], dtype=np.float64)
        except (TypeError, KeyError, ValueError) as exc:
            raise SnapshotError(f"snapshot's count model is unreadable: {exc!r}") from None
        if gram.shape != upper[0].shape or moment.shape != (WIDTH,):
            raise SnapshotError("snapshot's count model has the wrong shape")
        if not (np.isfinite(gram).all() and np.isfinite(moment).all()):
            raise SnapshotError("snapshot's count model is not finite")
        full = np.zeros((WIDTH, WIDTH))
        full[upper] = gram
        full.T[upper] = gram
        self._gram = full
        self._moment = moment
        self.weights = np.asarray(np.linalg.solve(full + RIDGE * np.eye(WIDTH), moment), dtype=np.float64)
