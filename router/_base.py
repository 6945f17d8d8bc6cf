"""The Router interface and the slot-filling loop every implementation shares.

A router fills slots one kind at a time (in ``context.kinds`` order), one slot at a time: each slot
offers the not-yet-chosen candidates of the kind that still fit the remaining token budget, plus
the stop option (:data:`memabra.STOP_ID`, always last). The implementation returns a distribution
over those options (:meth:`Router._slot_distribution`); the loop validates it, applies the
probability floor, draws from it with a seeded generator and records the whole distribution in a
:class:`~memabra.SlotDraw`. After each pick the remaining options are scored again, so a later slot
is not a leftover of the first slot's ranking.

Implementations override :meth:`Router._slot_distribution` (deterministic given the model, so
teacher-forced replays reproduce it; its feature table is read-only), and learners also
:meth:`Router._update`, :meth:`Router._model_bytes` and :meth:`Router._load_model` (docs/custom_router.md).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Self

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError, SnapshotError
from memabra._records import (
    Budget,
    Candidate,
    PolicySnapshot,
    RewardBreakdown,
    RoutingContext,
    ScoredCandidate,
    Selection,
    SlotDraw,
)
from memabra.router._credit import SlotCredit, credit_learning
from memabra.router._features import FeatureTable, featurize, recall
from memabra.router._params import check_shared_params, constructor_params
from memabra.router._persistence import replica_of, restore_router, snapshot_of
from memabra.router._sampling import floored_distribution
from memabra.router._similarity import Similarity
from memabra.router._slots import SlotView, fill_slots, replay_slots, scored_offers, validate_choice

__all__ = ["Router", "SlotView"]


class Router(ABC):
    """Chooses which candidates enter an agent's context, slot by slot, with logged propensities.

    Parameters shared by every router (subclasses add their own):

    seed
        Seeds the draws: the ``n``-th decision of a router built (or restored) with this seed uses
        the seed ``SeedSequence([seed, n])``, recorded in ``Selection.seed``.
    min_probability
        Floor of every option's probability in every slot (0 disables it).
    recall_limit
        Only the best ``recall_limit`` candidates of each kind by the hybrid prior are offered
        (``None``: all).
    similarity
        Lexical / semantic scorer for featurisation; ``None`` means :meth:`Similarity.default`.
    unused_penalty
        Share of one retrieval hit charged to a candidate injected but unused (see
        :mod:`memabra.router._credit`).
    max_pending
        How many issued selections are remembered for :meth:`learn`; older ones are forgotten.

    ``__init__`` only stores parameters; the model is built on first use. A router is not
    picklable -- persist it with :meth:`snapshot` and :meth:`restore`.
    """

    name: ClassVar[str] = "router"
    learns: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a class that defines _update learns unless it says otherwise (it was never updated before)
        if "_update" in cls.__dict__ and "learns" not in cls.__dict__:
            cls.learns = True

    def __init__(
        self,
        *,
        seed: int = 0,
        min_probability: float = 0.0,
        recall_limit: int | None = 50,
        similarity: Similarity | None = None,
        unused_penalty: float = 0.3,
        max_pending: int = 100_000,
    ) -> None:
        self.seed = seed
        self.min_probability = min_probability
        self.recall_limit = recall_limit
        self.similarity = similarity
        self.unused_penalty = unused_penalty
        self.max_pending = max_pending
        self._lock = threading.RLock()
        self._ready = False

    # ----------------------------------------------------------------- parameters and state
    def get_params(self) -> dict[str, Any]:
        """Constructor arguments as JSON values (``similarity`` is recorded as a flag only): those of
        the concrete class's ``__init__`` (and of the one its ``**kwargs`` go to), so a snapshot's
        ``learner_args`` rebuild it."""
        return constructor_params(self, Router)

    def _check_params(self) -> None:
        """Raise :class:`~memabra.RouterError` for a bad constructor argument (subclasses extend it)."""
        check_shared_params(self)

    def _ensure_state(self) -> None:
        if self._ready:
            return
        self._check_params()
        self._similarity = self.similarity if self.similarity is not None else Similarity.default()
        self._decisions = 0
        self._updates = 0
        digest = hashlib.sha256(json.dumps(self.get_params(), sort_keys=True).encode()).hexdigest()[:10]
        self._root_version = f"{self.name}-{digest}"
        self._parent: str | None = None
        self._pending: OrderedDict[str, None] = OrderedDict()
        self._init_model()
        self._ready = True

    def _init_model(self) -> None:
        """Build the learner's fresh model (baselines have none)."""

    @property
    def policy_version(self) -> str:
        """The model's version: the snapshot it started from, plus the updates since (``+n``)."""
        with self._lock:
            self._ensure_state()
            return self._root_version if self._updates == 0 else f"{self._root_version}+{self._updates}"

    def __getstate__(self) -> object:
        raise TypeError(f"{type(self).__name__} is not picklable; persist it with snapshot() and restore()")

    # ----------------------------------------------------------------------------- choosing
    def featurize(
        self, context: RoutingContext, candidates: Sequence[Candidate], budget: Budget | None = None
    ) -> FeatureTable:
        """Feature rows as this router computes them (its similarity, the pool's own clock)."""
        with self._lock:
            self._ensure_state()
            similarity = self._similarity
        return featurize(context, candidates, similarity=similarity, budget=budget)

    def choose(
        self,
        context: RoutingContext,
        candidates: Sequence[Candidate],
        budget: Budget | None = None,
        *,
        features: FeatureTable | None = None,
        seed: int | None = None,
    ) -> Selection:
        """Fill the budget's slots from ``candidates`` and return the logged :class:`Selection`.

        ``budget`` defaults to ``context.budget``; ``features`` may carry rows precomputed with
        :meth:`featurize` (aligned with ``candidates``); ``seed`` overrides the router's own.
        """
        started = time.perf_counter()
        context, budget, pool = validate_choice(context, candidates, budget, features)
        with self._lock:
            self._ensure_state()
            if features is None:
                features = featurize(context, pool, similarity=self._similarity, budget=budget)
            table = features
            wanted = [i for i, c in enumerate(table.candidates) if c.kind in context.kinds]
            table = table.subset(wanted)
            table = table.subset(recall(table, self.recall_limit)).read_only()
            if seed is None:
                seed = int(np.random.SeedSequence([self.seed, self._decisions]).generate_state(1)[0])
            self._decisions += 1
            rng = np.random.default_rng(seed)
            draws = self._fill_slots(context, table, budget, rng)
            offered = self._offered(context, table, draws)
            selection = Selection(
                context=context,
                offered=offered,
                slots=tuple(draws),
                policy=self.name,
                policy_version=self.policy_version,
                seed=seed,
                latency_ms=(time.perf_counter() - started) * 1000.0,
            )
            self._pending[selection.id] = None
            while len(self._pending) > self.max_pending:
                self._pending.popitem(last=False)
        return selection

    def _fill_slots(
        self, context: RoutingContext, table: FeatureTable, budget: Budget, rng: np.random.Generator
    ) -> list[SlotDraw]:
        return fill_slots(context, table, budget, rng, self._slot_values)

    def _slot_values(self, view: SlotView) -> tuple[float, ...]:
        """:meth:`_distribution` as Python floats: what the slot loop draws from and logs."""
        return tuple(self._distribution(view).tolist())

    def _distribution(self, view: SlotView) -> NDArray[np.float64]:
        """:meth:`_slot_distribution`, checked and floored (:func:`floored_distribution`)."""
        return floored_distribution(self, view)

    def _offered(
        self, context: RoutingContext, table: FeatureTable, draws: Sequence[SlotDraw]
    ) -> tuple[ScoredCandidate, ...]:
        scores = np.asarray(self._decision_scores(context, table, draws), dtype=np.float64)
        if scores.shape != (len(table.candidates),) or not np.all(np.isfinite(scores)):
            raise RouterError(f"{type(self).__name__} produced unusable candidate scores: {scores}")
        return scored_offers(table, scores)

    def _decision_scores(
        self, context: RoutingContext, table: FeatureTable, draws: Sequence[SlotDraw]
    ) -> NDArray[np.float64]:
        """The scores recorded in ``Selection.offered`` for the decision that drew ``draws``:
        :meth:`_scores`, unless a router's scores depend on what earlier slots picked."""
        return self._scores(context, table)

    def _scores(self, context: RoutingContext, table: FeatureTable) -> NDArray[np.float64]:
        """Per-candidate scores recorded in ``Selection.offered`` (higher is better); the hybrid
        prior unless the router has a score of its own."""
        return table.column("hyb_z")

    @abstractmethod
    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        """Probabilities over ``view``'s options (eligible candidates, then stop); deterministic."""

    # ------------------------------------------------------------------ teacher-forced replay
    def _replay(self, selection: Selection) -> Iterator[tuple[SlotView, SlotDraw, tuple[int, ...]]]:
        """Each slot's view of a logged selection, logged choices forced (:func:`replay_slots`)."""
        for view, draw, option_of in replay_slots(selection):
            view.table.matrix.flags.writeable = False  # the replay's own table, rebuilt from the log
            yield view, draw, option_of

    def slot_probabilities(self, selection: Selection) -> tuple[tuple[float, ...], ...]:
        """This router's probabilities for each logged slot, aligned with
        ``selection.slots[i].candidate_ids``, with the logged choices forced (teacher forcing).

        ``pi_e(logged choice | logged prefix)`` of slot ``i`` is
        ``result[i][selection.slots[i].candidate_ids.index(chosen_id)]``. When a logged slot did not
        offer the stop option, this router's distribution is renormalised over the offered ones.
        """
        out: list[tuple[float, ...]] = []
        with self._lock:
            self._ensure_state()
            for view, _draw, option_of in self._replay(selection):
                probabilities = self._distribution(view)
                picked = probabilities[list(option_of)]
                total = float(picked.sum())
                if total <= 0.0:
                    picked = np.full(len(option_of), 1.0 / len(option_of))
                else:
                    picked = picked / total
                out.append(tuple(float(p) for p in picked))
        return tuple(out)

    # ----------------------------------------------------------------------------- learning
    def learn(
        self,
        selection: Selection,
        reward: RewardBreakdown | float,
        outcomes: Mapping[str, float] | None = None,
        *,
        local_credit: bool = True,
        missing: Sequence[str] = (),
    ) -> None:
        """Learn from the reward of a selection this router made.

        ``outcomes`` are the chosen candidates' local outcomes (1.0 used or helped, 0.0 injected
        but unused); unless ``local_credit`` is false, credit is attributed slot by slot from them
        (:mod:`memabra.router._credit`); with ``local_credit=False`` every slot shares the reward.
        ``missing`` names candidates the turn needed but the selection left out (an agent learns
        them from a failed or refused call); the learner is taught that adding them would have
        helped. Ids that were not offered are ignored (the router could not have chosen them).

        Raises :class:`~memabra.RouterError` for a selection this router did not make, or one it
        has already learned from, for outcomes of candidates it did not choose and for a
        ``missing`` id it did choose.
        """
        if not isinstance(selection, Selection):
            raise RouterError(f"learn needs a Selection, got {type(selection).__name__}")
        with self._lock:
            self._ensure_state()
            if selection.id not in self._pending:
                raise RouterError(
                    f"selection {selection.id} was not made by this router (or was already learned from, "
                    f"or is older than the last {self.max_pending} decisions)"
                )
            credited = credit_learning(selection, reward, outcomes, local_credit, missing, float(self.unused_penalty))
            del self._pending[selection.id]
            self._learn_credits(selection, *credited)

    def _forget_pending(self, selection_id: str) -> None:
        """Stop waiting for :meth:`learn` on a selection: its reward reaches a learner through the
        log instead (:meth:`learn_logged`), so keeping its id would only hold memory."""
        with self._lock:
            if self._ready:
                self._pending.pop(selection_id, None)

    def learn_logged(
        self,
        selection: Selection,
        reward: RewardBreakdown | float,
        outcomes: Mapping[str, float] | None = None,
        *,
        local_credit: bool = True,
        missing: Sequence[str] = (),
    ) -> None:
        """Learn off-policy from a selection another policy logged (``outcomes``, ``local_credit``
        and ``missing`` as in :meth:`learn`)."""
        if not isinstance(selection, Selection):
            raise RouterError(f"learn_logged needs a Selection, got {type(selection).__name__}")
        with self._lock:
            self._ensure_state()
            credited = credit_learning(selection, reward, outcomes, local_credit, missing, float(self.unused_penalty))
            self._learn_credits(selection, *credited)

    def _learn_credits(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        if not self.learns:
            return
        self._update(selection, credits, missing_credit, missing)
        self._updates += 1

    def _update(
        self,
        selection: Selection,
        credits: tuple[SlotCredit, ...],
        missing_credit: float | None,
        missing: tuple[str, ...],
    ) -> None:
        """Apply one selection's per-slot credits, and the credit ``missing_credit`` of each
        ``missing`` candidate (offered, not chosen, needed), to the model (learners override)."""

    # ----------------------------------------------------------------------------- snapshots
    def _model_bytes(self) -> bytes:
        return b""

    def _load_model(self, payload: bytes) -> None:
        if payload:
            raise SnapshotError(f"a {self.name} snapshot carries no model, got {len(payload)} bytes")

    def _extra_state(self) -> dict[str, Any]:
        """JSON state besides the model bytes that a snapshot must carry (learners override)."""
        return {}

    def _restore_extra_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`_extra_state`; raise :class:`SnapshotError` on bad values."""

    def snapshot(self) -> PolicySnapshot:
        """The router's current state as a :class:`~memabra.PolicySnapshot` (model bytes wrapped in a
        checksummed envelope, constructor arguments, version and parent)."""
        return snapshot_of(self)

    def replica(
        self, *, similarity: Similarity | None = None, version: str | None = None, parent: str | None = None
    ) -> Self:
        """An independent router in this one's state: what :meth:`restore` gives for
        :meth:`snapshot` (renamed to ``version`` and ``parent`` when ``version`` is given), without
        encoding the model. The in-process learner hands serving its model after every reward it
        learns, on the path of the turn that brought the reward: a copy, not a round trip through
        compressed bytes and a checksum."""
        return replica_of(self, similarity=similarity, version=version, parent=parent)

    def _copy_model_from(self, source: Router) -> None:
        """Take ``source``'s model (a router of this class); learners whose model is plain arrays
        override the round trip through bytes."""
        self._load_model(source._model_bytes())

    @classmethod
    def restore(cls, snapshot: PolicySnapshot, *, similarity: Similarity | None = None) -> Self:
        """A router of this class in the state ``snapshot`` holds; it predicts exactly as the
        snapshotted one did. Raises :class:`~memabra.SnapshotError` for a snapshot of another
        policy or with corrupted bytes."""
        return restore_router(cls, snapshot, similarity)
