"""The Vowpal Wabbit learner: VW ``--cb_adf`` as the cost-regression oracle of the residual around
the hybrid prior (:mod:`memabra.router._residual`: the same prior, exploration and update loop as
the numpy learner); memabra explores over prior + residual. A fresh router ranks exactly as the
hybrid baseline.

Features (:mod:`memabra.router._vw_examples`): query token × candidate id (``qa``), query token ×
candidate text token (``qw``), user × candidate id and words (``ua``, ``uw``), slot position ×
candidate kind (``kt``), and the numeric similarity / history features. Unlike the numpy learner it
has no "already chosen" × candidate crosses and no per-request stop features: with these
interactions one VW prediction a decision scores every slot
(:mod:`memabra.router._vw_decision_scores`), which those features would break.

Why one ``--cb_adf`` example per slot rather than ``--ccb_explore_adf``: the stop option, candidates
dropping out when they no longer fit the remaining tokens, and a fresh score after every pick all
need a slot's option set to depend on earlier picks, which a CCB example fixes up front.

Costs are negated per-slot credits (VW minimises cost) clipped to the composite reward's range for
the default weights. A VW workspace is neither thread-safe nor picklable: each router owns one,
touched only under the router's lock, and persists through :meth:`snapshot` (VW's model bytes).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import RouterError, SnapshotError
from memabra.router._base import SlotView
from memabra.router._residual import DEFAULT_EPSILON, DEFAULT_TOP_M, ResidualRouter
from memabra.router._similarity import Similarity
from memabra.router._vw_decision_scores import DecisionScores, slot_invariant
from memabra.router._vw_examples import (
    candidate_lines,
    context_line,
    identity_lines,
    label_line,
    shared_line,
    slot_example,
)

__all__ = ["VWRouter"]

# VW settings no user needs to change (reasons in docs/router.md):
CB_TYPE = "mtr"  # the direct cost regression the residual needs; ips/dr weight by propensities
POWER_T = 0.25  # per-feature step sizes decay slowly, so drifting preferences are unlearned
BIT_PRECISION = 20  # 2 ** 20 weights: the query x word crosses of the multi-turn registry fit
INTERACTIONS = ("qa", "qw", "ua", "uw", "kt")
IGNORE_LINEAR = "qukw"  # shared namespaces on their own shift every option alike; words only in crosses
TEXT_TOKENS = 24  # the first words of a tool or memory carry its name and purpose


class VWRouter(ResidualRouter):
    """Contextual bandit over slots with Vowpal Wabbit (see the module docstring).

    learning_rate
        VW's ``-l``.
    exploration, epsilon, top_m
        As for every learner (:class:`~memabra.router.ResidualRouter`).
    """

    name = "vw"

    # Deliberate repeat (ResidualRouter, LinearRouter, VWRouter): each learner spells out its whole
    # signature, sklearn-style, so help() and parameter introspection show every knob and default.
    def __init__(
        self,
        *,
        learning_rate: float = 0.5,
        exploration: str = "epsilon",
        epsilon: float = DEFAULT_EPSILON,
        top_m: int = DEFAULT_TOP_M,
        seed: int = 0,
        min_probability: float = 1e-5,
        recall_limit: int | None = 50,
        similarity: Similarity | None = None,
    ) -> None:
        super().__init__(
            exploration=exploration,
            epsilon=epsilon,
            top_m=top_m,
            seed=seed,
            min_probability=min_probability,
            recall_limit=recall_limit,
            similarity=similarity,
        )
        self.learning_rate = learning_rate

    # -------------------------------------------------------------------------- workspace
    def _check_params(self) -> None:
        super()._check_params()
        rate = self.learning_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0.0:
            raise RouterError(f"learning_rate must be positive, got {rate!r}")

    def _vw_args(self) -> list[str]:
        args = ["--cb_adf", "--cb_type", CB_TYPE, "--quiet", "--random_seed", str(self.seed)]
        args += ["-b", str(BIT_PRECISION), "-l", str(self.learning_rate), "--power_t", str(POWER_T)]
        for pair in INTERACTIONS:
            args += ["--interactions", pair]
        for namespace in IGNORE_LINEAR:
            args += ["--ignore_linear", namespace]
        return args

    def _new_workspace(self, model_path: str | None = None) -> Any:
        import vowpalwabbit

        args = (
            self._vw_args() if model_path is None else ["--quiet", "--preserve_performance_counters", "-i", model_path]
        )
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
        self._per_decision = slot_invariant(INTERACTIONS, "", IGNORE_LINEAR, "")
        self._vw = self._new_workspace()

    # ---------------------------------------------------------------------------- examples
    _text_words = TEXT_TOKENS

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

    # ---------------------------------------------------------------------------- learning
    def _fit(self, view: SlotView, option: int, target: float) -> None:
        # a cost regression: every fitted example counts once (probability 1)
        example = self._example(view)
        example[option + 1] = label_line(example[option + 1], target, 1.0)
        self._vw.learn(example)
        self._decision_cache = None

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
