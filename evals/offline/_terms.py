"""One logged decision reduced to the per-decision terms of :class:`~memabra.evals.ope.SlateTerms`.

The logged draws give pi_b; the target router replays them with the logged prefix forced
(:meth:`Router.slot_probabilities`) for pi_e, and also chooses on its own on the logged candidates
and features (the rollouts behind q_e). The reward model supplies q on every set the terms need.

A selection is a set: the reward depends on which candidates were injected, not on the order they
were drawn in. So a target that deterministically selects the set ``T`` on a decision has the value
of its *set-equivalent* policy, which draws the members of ``T`` not yet chosen in proportion to the
logger's own probabilities and stops once ``T`` is complete::

    pi~(a | h) = p_b(a | h) / p_b(T minus h | h)   for a in T minus h, when h is a subset of T

It selects ``T`` with probability 1, needs nothing but the logged distributions, and its per-draw
ratio is ``1 / p_b(T minus h | h)``: a logged decision that reached ``T`` in any order keeps a
weight near 1 instead of 0 (the teacher-forced target's order must match the logger's draw for
draw). Where the logged prefix has left ``T`` (or gives ``T``'s rest no probability), the target's
own teacher-forced distribution stays: the weight is 0 from there on either way.

Cascade DR's model term ``Q(h, a)`` is the model's value of the slate the target completes from
``h + a``. For a deterministic target every prefix on its path completes to ``T``, so
``Q = q(T)`` and cascade DR's baseline is ``q(T)`` (the terms between telescope to 0): a logged
stop where the target would go on is valued at the target's whole set, not at one more candidate.
For a stochastic target ``Q(h, a)`` stays the one-step ``q(h + a)`` (a rollout per prefix and
option would multiply the replay's cost); cascade DR is unbiased under support either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from memabra._records import STOP_ID, Selection
from memabra.evals.offline._slate_model import DecisionTable, SlateRewardModel
from memabra.evals.offline._support import FLOOR_CEILING, SUPPORT_PROBABILITY
from memabra.evals.ope import OPEInputError
from memabra.router import FeatureTable, Router

__all__ = ["DecisionContext", "PendingTerms", "RowBatch", "decision_terms", "set_equivalent"]

# rollouts of a stochastic target per decision for q_e; a deterministic one needs (and gets) one
STOCHASTIC_ROLLOUTS = 4
# a probability this close to 1 is a deterministic draw (the floor of a greedy router is ~1e-5)
_DETERMINISTIC = 1.0 - 1e-9
# probabilities are checked to this slack, as SlotDraw checks logged ones
_SUM_SLACK = 1e-6


class RowBatch:
    """Slate feature rows gathered across a chunk of decisions, predicted in one call per fold
    (a boosted model's predict costs milliseconds per call whatever the rows)."""

    def __init__(self, model: SlateRewardModel | None) -> None:
        self._model = model
        self._rows: list[NDArray[np.float64]] = []
        self._owners: list[int] = []
        self._predicted: NDArray[np.float64] | None = None
        self._offsets: list[int] = [0]

    def add(self, position: int, rows: NDArray[np.float64]) -> int:
        self._rows.append(rows)
        self._owners.append(position)
        self._offsets.append(self._offsets[-1] + rows.shape[0])
        return len(self._rows) - 1

    def run(self) -> None:
        total = self._offsets[-1]
        self._predicted = np.zeros(total)
        if self._model is None or not self._rows:
            return
        folds = np.array([self._model.fold_of(owner) for owner in self._owners])
        stacked = np.vstack(self._rows)
        per_row = np.repeat(folds, np.diff(self._offsets))
        for fold in np.unique(per_row).tolist():
            mask = per_row == fold
            self._predicted[mask] = self._model.predict_fold(int(fold), stacked[mask])

    def get(self, handle: int) -> NDArray[np.float64]:
        assert self._predicted is not None, "run() first"
        return self._predicted[self._offsets[handle] : self._offsets[handle + 1]]


@dataclass(frozen=True, slots=True)
class DecisionContext:
    """What every target shares for one decision: its table, prefixes and the model's prefix values."""

    selection: Selection
    reward: float
    table: DecisionTable
    prefixes: tuple[list[int], ...]
    handle: int
    position: int

    @classmethod
    def of(cls, selection: Selection, reward: float, batch: RowBatch, position: int) -> DecisionContext:
        """``position``: the decision's place in the log's time order (it picks the model's fold)."""
        table = DecisionTable.of(selection)
        prefixes: list[list[int]] = [[]]
        for draw in selection.slots:
            rows = list(prefixes[-1])
            if draw.chosen_id != STOP_ID:
                rows.append(table.index[draw.chosen_id])
            prefixes.append(rows)
        features = np.vstack([table.slate_features(rows) for rows in prefixes])
        return cls(selection, reward, table, tuple(prefixes), batch.add(position, features), position)


@dataclass(frozen=True, slots=True)
class PendingTerms:
    """A target's ratios and floor share for one decision, waiting for the model's predictions."""

    context: DecisionContext
    ratios: NDArray[np.float64]
    option_handles: tuple[tuple[int, NDArray[np.float64]] | None, ...]
    rollout_handle: int | None
    floor_share: float
    deterministic: bool = False

    def terms(self, batch: RowBatch) -> tuple[float, ...]:
        """The SlateTerms row (field order) of this decision for this target."""
        values = batch.get(self.context.handle)
        reward = self.context.reward
        q_target = 0.0 if self.rollout_handle is None else float(batch.get(self.rollout_handle).mean())
        ratios = self.ratios
        n_draws = ratios.size
        if n_draws == 0:
            return (
                reward,
                1.0,
                1.0,
                1.0,
                1.0,
                reward,
                reward,
                values[0],
                values[0],
                values[0],
                q_target,
            )
        gains = np.zeros(n_draws)
        for s, pending in enumerate(self.option_handles):
            if pending is not None:
                handle, weights = pending
                gains[s] = float(weights @ (batch.get(handle) - values[s]))
        cumulative = np.cumprod(ratios)
        before = np.concatenate(([1.0], cumulative[:-1]))
        increments = np.diff(values)
        increments[-1] = reward - values[-2]
        return (
            reward,
            float(cumulative[-1]),
            float(ratios.sum() - n_draws + 1),
            float(ratios.mean()),
            float(ratios[-1]),
            float(values[0] + ratios @ increments),
            float(values[0] + cumulative @ increments),
            float(values[0] + gains.sum()),
            float(q_target if self.deterministic and self.rollout_handle is not None else values[0] + before @ gains),
            float(values[-1]),
            q_target,
        )


def _check_target(probabilities: tuple[float, ...], selection: Selection, slot: int) -> NDArray[np.float64]:
    p = np.asarray(probabilities, dtype=np.float64)
    if not np.all(np.isfinite(p)) or p.min() < 0.0 or p.max() > 1.0 or abs(float(p.sum()) - 1.0) > _SUM_SLACK:
        raise OPEInputError(
            "evaluation_policy_pscore",
            f"the target's distribution for decision {selection.id} slot {slot} is not a distribution "
            f"(entries in [0, 1] summing to 1): {p.tolist()}",
        )
    return p


def _check_logged(selection: Selection, slot: int, probabilities: NDArray[np.float64], chosen: float) -> None:
    if not 0.0 < chosen <= 1.0:
        raise OPEInputError(
            "pscore",
            f"decision {selection.id} slot {slot}: logged propensity {chosen!r} is outside (0, 1]",
        )
    if probabilities.min() < 0.0 or abs(float(probabilities.sum()) - 1.0) > _SUM_SLACK:
        raise OPEInputError(
            "pscore",
            f"decision {selection.id} slot {slot}: the logged distribution does not sum to 1 "
            f"({float(probabilities.sum())!r})",
        )


def _floor_mass(logged: NDArray[np.float64], target: NDArray[np.float64]) -> float:
    low = float(logged.min())
    at_floor = logged < SUPPORT_PROBABILITY
    if float(logged.max()) - low > 1e-12 and low < FLOOR_CEILING:
        at_floor |= logged <= low * (1.0 + 1e-9)
    return float(target[at_floor].sum())


def _own_selections(selection: Selection, router: Router, seed: int) -> tuple[list[Selection], frozenset[str] | None]:
    """The target's own selections on the logged candidates and features (one when deterministic,
    :data:`STOCHASTIC_ROLLOUTS` otherwise) and, when deterministic, the set it selects."""
    candidates = [sc.candidate for sc in selection.offered]
    features = FeatureTable.from_rows(candidates, [sc.features for sc in selection.offered])
    own: list[Selection] = []
    for k in range(STOCHASTIC_ROLLOUTS):
        own.append(router.choose(selection.context, candidates, features=features, seed=seed * STOCHASTIC_ROLLOUTS + k))
        if all(draw.chosen_probability >= _DETERMINISTIC for draw in own[0].slots):
            return own, frozenset(cid for cid in own[0].chosen_ids if cid != STOP_ID)
    return own, None


def set_equivalent(
    logged: NDArray[np.float64], candidate_ids: tuple[str, ...], prefix: frozenset[str], target_set: frozenset[str]
) -> NDArray[np.float64] | None:
    """``pi~`` of the module docstring on one logged slot, or None where it does not apply (the
    prefix has left the target's set, or the logger gives the set's rest no probability)."""
    if not prefix <= target_set:
        return None
    rest = target_set - prefix
    options = [k for k, cid in enumerate(candidate_ids) if cid in rest]
    if not options:  # the set is complete, or its rest is of another kind: this slot stops
        options = [k for k, cid in enumerate(candidate_ids) if cid == STOP_ID]
    mass = float(logged[options].sum()) if options else 0.0
    if mass <= 0.0:
        return None
    out = np.zeros(logged.size)
    out[options] = logged[options] / mass
    return out


def decision_terms(
    context: DecisionContext, router: Router, batch: RowBatch, *, seed: int, model: bool
) -> tuple[PendingTerms, PendingTerms | None]:
    """Replay one decision for one target; the model's rows are queued on ``batch``.

    Returns the terms of the set-equivalent replay and, for a deterministic target, also those of
    its own order (teacher forced): both select the target's set, so both have its value, and which
    has the lighter weight tail depends on the logger (see :func:`set_equivalent`)."""
    selection, table = context.selection, context.table
    logged = tuple(np.asarray(draw.probabilities, dtype=np.float64) for draw in selection.slots)
    for draw, probabilities in zip(selection.slots, logged, strict=True):
        _check_logged(selection, draw.slot, probabilities, draw.chosen_probability)
    target = tuple(
        _check_target(probabilities, selection, draw.slot)
        for draw, probabilities in zip(selection.slots, router.slot_probabilities(selection), strict=True)
    )
    own, target_set = _own_selections(selection, router, seed)
    rollout = (
        batch.add(context.position, np.vstack([table.slate_features(table.rows_of(o.chosen_ids)) for o in own]))
        if model
        else None
    )
    equivalent = _pending(context, logged, target, target_set, batch, rollout, model=model)
    if target_set is None:
        return equivalent, None
    return equivalent, _pending(context, logged, target, None, batch, rollout, model=model, deterministic=True)


def _pending(
    context: DecisionContext,
    logged: tuple[NDArray[np.float64], ...],
    target: tuple[NDArray[np.float64], ...],
    target_set: frozenset[str] | None,
    batch: RowBatch,
    rollout: int | None,
    *,
    model: bool,
    deterministic: bool = False,
) -> PendingTerms:
    """The terms of one replay: ``target_set`` given, the set-equivalent policy; else the target's
    own teacher-forced distributions."""
    selection, table = context.selection, context.table
    n_draws = len(selection.slots)
    ratios = np.ones(n_draws)
    options: list[tuple[int, NDArray[np.float64]] | None] = []
    floor = 0.0
    for s, (draw, pi_b, pi_e) in enumerate(zip(selection.slots, logged, target, strict=True)):
        if target_set is not None:
            prefix = frozenset(d.chosen_id for d in selection.slots[:s] if d.chosen_id != STOP_ID)
            equivalent = set_equivalent(pi_b, draw.candidate_ids, prefix, target_set)
            pi_e = pi_e if equivalent is None else equivalent
        pick = draw.candidate_ids.index(draw.chosen_id)
        ratios[s] = pi_e[pick] / draw.chosen_probability
        floor += _floor_mass(pi_b, pi_e)
        used = [k for k in np.flatnonzero(pi_e > 0.0).tolist() if draw.candidate_ids[k] != STOP_ID] if model else []
        if used:
            rows = table.extended_features(context.prefixes[s], [table.index[draw.candidate_ids[k]] for k in used])
            options.append((batch.add(context.position, rows), pi_e[used]))
        else:
            options.append(None)
    return PendingTerms(
        context,
        ratios,
        tuple(options),
        rollout,
        floor / n_draws if n_draws else 0.0,
        deterministic or target_set is not None,
    )
