"""Routers written as a user would write them from docs/custom_router.md: valid ones and ones that
break a contract the conformance suite must catch."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra import STOP_ID, Budget, Candidate, RoutingContext, Selection, SlotDraw
from memabra.router import FeatureTable, Router, SlotCredit, SlotView


class PopularityRouter(Router):
    """Per-user popularity: the summed credit each user's candidates earned; 10% spread evenly."""

    name = "popularity"

    def _init_model(self) -> None:
        self.counts: dict[str, dict[str, float]] = {}

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        seen = self.counts.get(view.context.user_id or "", {})
        scores = np.array([seen.get(view.table.candidates[i].id, 0.0) for i in view.eligible])
        scores = scores + 0.01 * view.table.column("hyb_z")[view.rows]
        out = np.zeros(view.n_options)
        out[int(np.argmax(scores))] = 0.9
        out[:-1] += 0.1 / len(view.eligible)
        return out

    def _update(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        mine = self.counts.setdefault(selection.context.user_id or "", {})
        for draw, credit in zip(selection.slots, credits, strict=True):
            if draw.chosen_id != STOP_ID:
                mine[draw.chosen_id] = mine.get(draw.chosen_id, 0.0) + credit.credit

    def _model_bytes(self) -> bytes:
        return json.dumps(self.counts, sort_keys=True).encode()

    def _load_model(self, payload: bytes) -> None:
        self.counts = json.loads(payload) if payload else {}


class ThompsonRouter(Router):
    """Beta-Bernoulli Thompson sampling that logs what it draws: each option's probability of being
    the posterior's best, by a fixed-seed Monte Carlo (so replays reproduce it)."""

    name = "thompson"

    def _init_model(self) -> None:
        self.wins: dict[str, list[float]] = {}

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        ab = np.array([self.wins.get(view.table.candidates[i].id, [1.0, 1.0]) for i in view.eligible])
        theta = np.random.default_rng(0).beta(ab[:, 0], ab[:, 1], size=(256, len(ab)))
        out = np.zeros(view.n_options)
        out[:-1] = 0.9 * np.bincount(theta.argmax(axis=1), minlength=len(ab)) / 256 + 0.1 / len(ab)
        return out

    def _update(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        for draw, credit in zip(selection.slots, credits, strict=True):
            if draw.chosen_id != STOP_ID:
                ab = self.wins.setdefault(draw.chosen_id, [1.0, 1.0])
                ab[0 if credit.credit > 0 else 1] += 1.0

    def _model_bytes(self) -> bytes:
        return json.dumps(self.wins, sort_keys=True).encode()

    def _load_model(self, payload: bytes) -> None:
        self.wins = json.loads(payload) if payload else {}


class TemperatureRouter(Router):
    """Softmax over the prior; forwards the Router arguments with ``**kwargs``."""

    name = "temperature"

    def __init__(self, temperature: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.temperature = temperature

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        z = view.table.column("hyb_z")[view.rows] / self.temperature
        p = np.exp(z - z.max())
        out = np.full(view.n_options, 0.05)
        out[:-1] = 0.95 * p / p.sum()
        return out


# ------------------------------------------------------------------------- broken ones


class ScalingInPlace(TemperatureRouter):
    """Divides the table's column in place: the caller's features change."""

    name = "scaling-in-place"

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        view.table.column("hyb_z")[:] /= self.temperature
        return super()._slot_distribution(view)


class SampledThompson(ThompsonRouter):
    """Samples the posterior from the decision's seed and replays with the logged seed: it logs
    probability 1 for a pick that is random from decision to decision."""

    name = "sampled-thompson"

    def choose(self, context: RoutingContext, candidates: Sequence[Candidate], budget: Budget | None = None, *,
               features: FeatureTable | None = None, seed: int | None = None) -> Selection:  # fmt: skip
        if seed is None:  # the seed the base class would give this decision
            self._ensure_state()
            seed = int(np.random.SeedSequence([self.seed, self._decisions]).generate_state(1)[0])
        self._theta_seed = seed
        return super().choose(context, candidates, budget, features=features, seed=seed)

    def slot_probabilities(self, selection: Selection) -> tuple[tuple[float, ...], ...]:
        self._theta_seed = selection.seed
        return super().slot_probabilities(selection)

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        ab = np.array([self.wins.get(view.table.candidates[i].id, [1.0, 1.0]) for i in view.eligible])
        theta = np.random.default_rng([getattr(self, "_theta_seed", 0), view.slot]).beta(ab[:, 0], ab[:, 1])
        out = np.zeros(view.n_options)
        out[int(np.argmax(theta))] = 1.0
        return out


class GreedyDrawer(TemperatureRouter):
    """Logs the softmax but draws every decision with one fixed generator."""

    name = "greedy-drawer"

    def _fill_slots(
        self, context: RoutingContext, table: FeatureTable, budget: Budget, rng: np.random.Generator
    ) -> list[SlotDraw]:
        return super()._fill_slots(context, table, budget, np.random.default_rng(0))


class ForgetfulMean(PopularityRouter):
    """A running mean per candidate whose snapshot keeps the means and forgets the counts."""

    name = "forgetful-mean"

    def _init_model(self) -> None:
        self.counts = {}
        self.n: dict[str, int] = {}

    def _update(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        mine = self.counts.setdefault(selection.context.user_id or "", {})
        for draw, credit in zip(selection.slots, credits, strict=True):
            if draw.chosen_id != STOP_ID:
                n = self.n[draw.chosen_id] = self.n.get(draw.chosen_id, 0) + 1
                mean = mine.get(draw.chosen_id, 0.0)
                mine[draw.chosen_id] = mean + (credit.credit - mean) / n


class RenamedArgument(Router):
    """Keeps its constructor argument under another name."""

    name = "renamed-argument"

    def __init__(self, temperature: float = 1.0, *, seed: int = 0, similarity: Any = None) -> None:
        super().__init__(seed=seed, similarity=similarity)
        self.temp = temperature

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        out = np.zeros(view.n_options)
        out[0] = 1.0
        return out


class LearnsInLearn(TemperatureRouter):
    """Learns in an override of ``learn``: the bench teaches it, the learner process (which calls
    ``learn_logged``) never does."""

    name = "learns-in-learn"

    def _init_model(self) -> None:
        self.bonus: dict[str, float] = {}

    def learn(self, selection: Selection, reward: Any, outcomes: Any = None, **kwargs: Any) -> None:
        super().learn(selection, reward, outcomes, **kwargs)
        for cid in selection.chosen_ids:
            self.bonus[cid] = self.bonus.get(cid, 0.0) + 1.0

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        out = super()._slot_distribution(view)
        bonus = np.array([self.bonus.get(view.table.candidates[i].id, 0.0) for i in view.eligible])
        out[:-1] *= np.exp(0.1 * bonus)
        return out / out.sum()

    def _model_bytes(self) -> bytes:
        return json.dumps(self.bonus, sort_keys=True).encode()

    def _load_model(self, payload: bytes) -> None:
        self.bonus = json.loads(payload) if payload else {}


class PickledSGD(Router):
    """A scikit-learn SGDRegressor on three columns, snapshotted with pickle: equal models, other bytes."""

    name = "pickled-sgd"
    features = ("hyb_z", "lex_rr", "helped_rate")

    def _init_model(self) -> None:
        from sklearn.linear_model import SGDRegressor

        self.model = SGDRegressor(random_state=0)

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        x = np.column_stack([view.table.column(f)[view.rows] for f in self.features])
        score = view.table.column("hyb_z")[view.rows]
        if hasattr(self.model, "coef_"):
            score = score + self.model.predict(x)
        p = np.exp(score - score.max())
        out = np.full(view.n_options, 0.1)
        out[:-1] = 0.9 * p / p.sum()
        return out

    def _update(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        rows = {sc.candidate.id: [sc.features[f] for f in self.features] for sc in selection.offered}
        picked = [(rows[d.chosen_id], c.credit) for d, c in zip(selection.slots, credits, strict=True)
                  if d.chosen_id != STOP_ID]  # fmt: skip
        if picked:
            self.model.partial_fit(np.array([x for x, _ in picked]), np.array([y for _, y in picked]))

    def _model_bytes(self) -> bytes:
        return pickle.dumps(self.model)

    def _load_model(self, payload: bytes) -> None:
        if payload:
            self.model = pickle.loads(payload)  # noqa: S301 - the test's own bytes


class KeywordsOnlyForSeed(Router):
    """Takes ``seed`` but not ``similarity``: a restore cannot rebuild it."""

    name = "keywords-only-for-seed"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed=seed)

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        return np.full(view.n_options, 1.0 / view.n_options)
