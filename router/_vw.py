"""The default learner: Vowpal Wabbit, one contextual-bandit example per slot decision.

Two heads share the examples of :mod:`memabra.router._vw_examples`:

* ``exploration`` in ``epsilon``, ``squarecb``, ``softmax``, ``greedy`` (default ``epsilon``): VW
  ``--cb_adf`` is the cost-regression oracle and learns the residual around the hybrid prior, and
  memabra explores over prior + residual (:mod:`memabra.router._residual`). A fresh router ranks
  exactly as the hybrid baseline.
* ``exploration`` in ``vw-epsilon``, ``vw-squarecb``, ``vw-regcbopt``, ``vw-bag``, ``vw-cover``,
  ``vw-softmax``: VW ``--cb_explore_adf`` with its own explorer. VW takes no fixed offset, so the
  prior is taught instead: the fresh workspace learns ``prior_examples`` synthetic slot decisions
  whose cost is the prior ``c0`` (a warm start), and the hybrid score stays a feature that real
  rewards refine. The margins do not apply (VW returns probabilities, not costs).

Both heads were measured on the development files (``memabra bench``, 5 passes, seed 0; memory file
over seeds 0-2), first-pass / last-pass hit rate against the hybrid baseline's 0.967 / 0.980 / 0.950
(memory / tools / 30-tool registry): the offset head (greedy) kept every first pass equal to the
baseline's and beat it in the last pass (memory 0.967 -> 0.989-1.000, tools 0.980 -> 1.000, registry
0.950 -> 0.975); the warm-started native heads lost first-pass hits (``vw-epsilon`` 0.833 / 0.965 /
0.930, ``vw-squarecb`` 0.911 / 0.980 / 0.930, ``vw-bag`` 0.833 / 0.980 / 0.915) because the warm
start only approximates the prior and real updates move its weights; ``vw-regcbopt`` stayed near
random (0.089 / 0.420 / 0.035). Without any prior (``prior=False``) the memory first pass fell to
0.32. The offset head is the default.

Why one ``--cb_*_adf`` example per slot rather than ``--ccb_explore_adf``: the stop option, candidates
dropping out when they no longer fit the remaining tokens, and a fresh score after every pick all
need a slot's option set to depend on earlier picks, which a CCB example fixes up front; replays for
offline evaluation are then plain predictions. (With the default interactions the per-slot examples
are not predicted one by one: one prediction a decision gives the same scores, see
:mod:`memabra.router._vw_decision_scores`.) Measured on the memory file (the one multi-slot file;
same warm start, ``-q qa``, 5 slots always filled, seeds 0-2), CCB's first pass averaged 0.922
against the baseline's 0.967 (last pass 0.97-1.0), and it cannot learn to inject fewer.

Costs are negated per-slot credits (VW minimises cost) clipped to the composite reward's range for
the default weights, also passed as ``--cb_min_cost``/``--cb_max_cost`` to the native explorers
(RegCB and SquareCB assume it). A VW workspace is neither thread-safe nor picklable: each router owns
one, touched only under the router's lock, and persists through :meth:`snapshot` (VW's model bytes).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError, SnapshotError
from memabra._records import RewardWeights
from memabra.router._base import SlotView
from memabra.router._residual import OFFSET_EXPLORATIONS, ResidualRouter, cost_range
from memabra.router._similarity import Similarity
from memabra.router._vw_decision_scores import DecisionScores, slot_invariant
from memabra.router._vw_examples import (
    candidate_lines,
    context_line,
    identity_lines,
    label_line,
    shared_line,
    slot_example,
    synthetic_slot,
)

__all__ = ["EXPLORATIONS", "VW_EXPLORATIONS", "VWRouter"]

VW_EXPLORATIONS = ("vw-epsilon", "vw-squarecb", "vw-regcbopt", "vw-bag", "vw-cover", "vw-softmax")
EXPLORATIONS = OFFSET_EXPLORATIONS + VW_EXPLORATIONS


class VWRouter(ResidualRouter):
    """Contextual bandit over slots with Vowpal Wabbit (see the module docstring for both heads and
    :class:`~memabra.router._residual.ResidualRouter` for the shared parameters).

    cb_type
        VW's estimator for the chosen action's cost (``mtr``, ``dr``, ``ips``).
    learning_rate, power_t, bit_precision
        VW's ``-l``, ``--power_t`` and ``-b``. ``power_t=0`` keeps per-feature step sizes from
        decaying, so preferences that drift are unlearned (measured on the simulator's drift).
        ``-l 0.5``: ``-l 2`` learned to inject fewer memories faster on the memory bench file but
        halved the demo's first-100 reward (+0.44 against +0.89), where every slot shares a noisy
        slate reward; direct per-candidate evidence is weighted up instead (``local_weight``).
    interactions
        Namespace pairs crossed (see :mod:`memabra.router._vw_examples`).
    ignore
        Namespaces VW drops entirely (none by default).
    ignore_linear
        Namespaces used only inside interactions. By default the shared ones (``q``, ``u``, ``k``),
        which on their own shift every option, the stop option included, alike; and the candidate
        words ``w``, which on their own let a failed tool drag down the right one sharing its words.
    text_tokens
        How many tokens of a candidate's text enter namespace ``w``.
    bag_size, cover_size, prior_examples
        Native head only: ``--bag`` / ``--cover`` sizes and the warm start's length.
    """

    name = "vw"
    explorations = EXPLORATIONS

    def __init__(
        self,
        *,
        cb_type: str = "mtr",
        learning_rate: float = 0.5,
        power_t: float = 0.25,
        bit_precision: int = 20,
        interactions: tuple[str, ...] = ("qa", "ua", "uw", "kt"),
        ignore: str = "",
        ignore_linear: str = "qukw",
        text_tokens: int = 24,
        bag_size: int = 5,
        cover_size: int = 3,
        prior_examples: int = 1000,
        extra_args: str = "",
        exploration: str = "greedy",
        epsilon: float = 0.01,
        gamma_scale: float = 1000.0,
        gamma_exponent: float = 0.5,
        softmax_lambda: float = 10.0,
        prior: bool = True,
        prior_offset: float = 0.5,
        prior_scale: float = 0.1,
        prior_margin: float = 0.4,
        stop_margin: float = 0.0,
        anchor_stop: bool = True,
        evidence_margin: float = 0.4,
        local_weight: float = 8.0,
        seed: int = 0,
        min_probability: float = 1e-5,
        recall_limit: int | None = 50,
        similarity: Similarity | None = None,
        unused_penalty: float = 0.3,
        max_pending: int = 100_000,
        request_memory: int = 10_000,
    ) -> None:
        super().__init__(
            exploration=exploration,
            epsilon=epsilon,
            gamma_scale=gamma_scale,
            gamma_exponent=gamma_exponent,
            softmax_lambda=softmax_lambda,
            prior=prior,
            prior_offset=prior_offset,
            prior_scale=prior_scale,
            prior_margin=prior_margin,
            stop_margin=stop_margin,
            anchor_stop=anchor_stop,
            evidence_margin=evidence_margin,
            local_weight=local_weight,
            seed=seed,
            min_probability=min_probability,
            recall_limit=recall_limit,
            similarity=similarity,
            unused_penalty=unused_penalty,
            max_pending=max_pending,
            request_memory=request_memory,
        )
        self.cb_type = cb_type
        self.learning_rate = learning_rate
        self.power_t = power_t
        self.bit_precision = bit_precision
        self.interactions = tuple(interactions)
        self.ignore = ignore
        self.ignore_linear = ignore_linear
        self.text_tokens = text_tokens
        self.bag_size = bag_size
        self.cover_size = cover_size
        self.prior_examples = prior_examples
        self.extra_args = extra_args

    # -------------------------------------------------------------------------- workspace
    @property
    def _native(self) -> bool:
        return self.exploration in VW_EXPLORATIONS

    def _check_params(self) -> None:
        super()._check_params()
        if self.cb_type not in ("mtr", "dr", "ips"):
            raise RouterError(f"cb_type must be mtr, dr or ips; got {self.cb_type!r}")
        if not isinstance(self.learning_rate, (int, float)) or not self.learning_rate > 0.0:
            raise RouterError(f"learning_rate must be positive, got {self.learning_rate!r}")
        if not isinstance(self.power_t, (int, float)) or not 0.0 <= self.power_t <= 1.0:
            raise RouterError(f"power_t must lie in [0, 1], got {self.power_t!r}")
        for pair in self.interactions:
            if not isinstance(pair, str) or len(pair) < 2 or not pair.isalpha():
                raise RouterError(f"interactions must be namespace letter pairs such as 'qa', got {pair!r}")
        for name in ("ignore", "ignore_linear"):
            value = getattr(self, name)
            if not isinstance(value, str) or not (value.isalpha() or value == ""):
                raise RouterError(f"{name} must be a string of namespace letters, got {value!r}")
        if isinstance(self.bit_precision, bool) or not isinstance(self.bit_precision, int) or not 1 <= self.bit_precision <= 28:
            raise RouterError(f"bit_precision must be an integer in [1, 28], got {self.bit_precision!r}")
        for name in ("text_tokens", "bag_size", "cover_size", "prior_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RouterError(f"{name} must be a non-negative integer, got {value!r}")

    def _vw_args(self) -> list[str]:
        args = [
            "--cb_explore_adf" if self._native else "--cb_adf",
            "--cb_type",
            self.cb_type,
            "--quiet",
            "--random_seed",
            str(self.seed),
            "-b",
            str(self.bit_precision),
            "-l",
            str(self.learning_rate),
            "--power_t",
            str(self.power_t),
        ]
        if self._native:
            low, high = cost_range(RewardWeights())
            args += ["--cb_min_cost", f"{low:.6g}", "--cb_max_cost", f"{high:.6g}"]
            args += {
                "vw-epsilon": ["--epsilon", str(self.epsilon)],
                "vw-squarecb": ["--squarecb", "--gamma_scale", str(self.gamma_scale), "--gamma_exponent", str(self.gamma_exponent)],
                "vw-regcbopt": ["--regcbopt"],
                "vw-bag": ["--bag", str(self.bag_size), "--epsilon", str(self.epsilon)],
                "vw-cover": ["--cover", str(self.cover_size), "--epsilon", str(self.epsilon)],
                "vw-softmax": ["--softmax", "--lambda", str(self.softmax_lambda)],
            }[self.exploration]
        for pair in self.interactions:
            args += ["--interactions", pair]
        for namespace in self.ignore:
            args += ["--ignore", namespace]
        for namespace in self.ignore_linear:
            args += ["--ignore_linear", namespace]
        if self.extra_args:
            args += self.extra_args.split()
        return args

    def _new_workspace(self, model_path: str | None = None) -> Any:
        import vowpalwabbit

        args = self._vw_args() if model_path is None else ["--quiet", "--preserve_performance_counters", "-i", model_path]
        try:
            return vowpalwabbit.Workspace(arg_list=args)
        except RuntimeError as exc:
            if model_path is not None:
                raise SnapshotError(f"Vowpal Wabbit rejected the snapshot's model: {exc}") from None
            raise RouterError(f"Vowpal Wabbit rejected the arguments {' '.join(args)}: {exc}") from None

    def _init_model(self) -> None:
        super()._init_model()
        self._line_cache: tuple[object, tuple[str, ...]] | None = None
        self._decision_cache: tuple[object, object, DecisionScores] | None = None
        self._per_decision = not self._native and slot_invariant(
            self.interactions, self.ignore, self.ignore_linear, self.extra_args
        )
        self._vw = self._new_workspace()
        if self.prior and self._native:
            self._teach_prior()

    def _teach_prior(self) -> None:
        rng = np.random.default_rng([self.seed, 7])
        for _ in range(self.prior_examples):
            example, hybrid = synthetic_slot(rng)
            costs = np.append(-(self.prior_offset + self.prior_scale * hybrid), 0.0)
            pick = int(rng.integers(0, costs.size))
            example[pick + 1] = label_line(example[pick + 1], float(costs[pick]), 1.0 / costs.size)
            self._vw.learn(example)

    # ---------------------------------------------------------------------------- examples
    @property
    def _text_words(self) -> int:
        return 0 if "w" in self.ignore else self.text_tokens

    def _example(self, view: SlotView) -> list[str]:
        cache = self._line_cache
        if cache is None or cache[0] is not view.table:
            cache = (view.table, candidate_lines(view.table, self._text_words))
            self._line_cache = cache
        shared = shared_line(view.context, view.kind.value, view.position)
        return slot_example(shared, cache[1], view.table.column("hyb_z"), view.eligible)

    def _predict_lines(self, lines: list[str]) -> NDArray[np.float64]:
        # pylibvw's multi-line predict directly: pyvw's Example wrappers cost ~5 µs a line, most of a
        # decision's time; the action scores (or probabilities) come back in action order either way
        import pylibvw

        parsed = self._vw._parse("\n".join(lines))
        try:
            pylibvw.vw.predict_multi(self._vw, parsed)
            values = np.asarray(parsed[0].get_action_scores(), dtype=np.float64)
        finally:
            pylibvw.vw._finish_example_multi_ex(self._vw, parsed)
        if values.shape != (len(lines) - 1,) or not np.all(np.isfinite(values)):
            raise RouterError(f"Vowpal Wabbit returned unusable output for {len(lines) - 1} actions: {values}")
        return values

    def _predict(self, view: SlotView) -> NDArray[np.float64]:
        return self._predict_lines(self._example(view))

    def _residuals(self, view: SlotView) -> NDArray[np.float64]:
        if not self._per_decision:
            return self._predict(view)
        cache = self._decision_cache
        if cache is None or cache[0] is not view.table or cache[1] is not view.context:
            lines = identity_lines(view.table, self._text_words)
            scores = DecisionScores.predict(self._predict_lines, context_line(view.context), lines, view.table.matrix)
            cache = (view.table, view.context, scores)
            self._decision_cache = cache
        return cache[2].residuals(view.eligible, view.position)

    def _slot_distribution(self, view: SlotView) -> NDArray[np.float64]:
        if not self._native:
            return super()._slot_distribution(view)
        probabilities = self._predict(view)
        total = probabilities.sum()
        return probabilities / total if total > 0 else np.full(view.n_options, 1.0 / view.n_options)

    # ---------------------------------------------------------------------------- learning
    def _fit(self, view: SlotView, option: int, target: float, probability: float) -> None:
        example = self._example(view)
        example[option + 1] = label_line(example[option + 1], target, probability)
        self._vw.learn(example)
        self._decision_cache = None

    def _prior_cost(self, view: SlotView, hybrid: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        # the native head learns raw costs: its prior is in the weights, not an offset
        if self._native:
            return np.zeros(view.n_options)
        return super()._prior_cost(view, hybrid)

    # -------------------------------------------------------------------------- snapshots
    def _model_bytes(self) -> bytes:
        with tempfile.TemporaryDirectory(prefix="memabra-vw-") as tmp:
            path = os.path.join(tmp, "model.vw")
            self._vw.save(path)
            with open(path, "rb") as fh:
                return fh.read()

    def _load_model(self, payload: bytes) -> None:
        if not payload:
            raise SnapshotError("a vw snapshot must carry model bytes")
        with tempfile.TemporaryDirectory(prefix="memabra-vw-") as tmp:
            path = os.path.join(tmp, "model.vw")
            with open(path, "wb") as fh:
                fh.write(payload)
            self._vw = self._new_workspace(path)
        self._line_cache = None
        self._decision_cache = None
