"""The composite reward of shared/specs/reward_spec.md.

    R = ws*S + wr*H - we*E - wc*C - wl*L - wx*X + wu*U

Each component is derived from signals and kept in a fixed range, so the total is bounded
(with the default weights R lies in [-1.9, 1.6]) and a learner can be given a fixed cost range.

===========  =============  ===============================================================
component    range          derived from
===========  =============  ===============================================================
S success    [-0.5, 1]      the latest explicit verdict: ``success`` as given; ``misleading``
                            -0.5; ``correct``: 1 / 0; ``redo`` 0; ``rating`` r in 1..5 gives
                            (r-1)/4; else programmatic ``accepted``: 1 / 0; else
                            ``default_success`` (0.5: nobody complained). A timeout or the
                            same question asked again caps S at 0 (the episode's ``timeout``
                            signal; a timed-out tool call costs E and L only).
H hit        [-1, 1]        per kind k in the decision: hits = chosen candidates of kind k
  (Hm,Hs,Ht)                that were used, useful or relevant; misses = relevant candidates
                            of kind k left out. H_k = (hits - misses) / (hits + misses); 0
                            when candidates were chosen but none helped; ``None`` when no
                            candidate of kind k was offered. H = mean of the H_k present.
E error      [0, 1]         sum over tool steps: ``minor_error`` (0.2) per failed call,
                            ``timeout_error`` (0.5) per timed-out call, ``serious_error``
                            (0.75) per failed or timed-out call repeating an earlier failed or
                            timed-out call with the same arguments and per ``tool_wrong``
                            verdict; clipped at 1.
C correction [0, 1]         sum of correction severities: an explicit ``correction``, a
                            ``tool_wrong`` or a ``retract_memory`` counts
                            ``correction_severity`` (1.0); an implicit ``repeat`` of the same
                            question counts ``repeat_severity`` (0.5); clipped at 1.
L latency    [0, 1]         0.5 * excess latency over ``latency_free_ms`` in units of
                            ``latency_scale_ms`` + 0.5 * steps beyond ``free_steps`` in units
                            of ``step_scale``, clipped at 1; a timeout gives 1.
X context    [0, 1]         injected tokens against the token budget: an unused candidate's
                            tokens count in full, a used one's at ``used_token_weight``
                            (0.25), one whose use is unknown at ``unknown_token_weight``
                            (0.5); divided by the budget's ``max_tokens``, clipped at 1.
U reuse      [0, 1]         ``reuse_unit`` (0.5) per chosen candidate the agent reused
                            instead of asking again (``useful_ids``), clipped at 1.
===========  =============  ===============================================================

Rewards are recomputable: the components are stored, so new weights give a new total
(:meth:`memabra.RewardBreakdown.reweighted`) without re-running anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from memabra._errors import FeedbackError
from memabra._records import (
    STOP_ID,
    CandidateKind,
    Episode,
    Feedback,
    RewardBreakdown,
    RewardComponents,
    RewardWeights,
    StepKind,
)
from memabra._signals import FEEDBACK_KEYS, FeedbackSignals

__all__ = ["FEEDBACK_KEYS", "CompositeReward", "RewardConfig", "rescored", "validate_payload"]

REWARD_VERSION = "v1"

# Longest reward version the log stores (its reward_version column).
_MAX_VERSION_LENGTH = 40


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate_payload(payload: Mapping[str, Any]) -> FeedbackSignals:
    """Parse a payload into its typed record; raises :class:`InvalidFeedbackError` naming the
    first unknown key or ill-typed value (``Feedback`` does this on construction)."""
    return FeedbackSignals.parse(payload)


def rescored(stored: RewardBreakdown, weights: RewardWeights, *, memory_label: float | None = None) -> RewardBreakdown:
    """A stored reward under new weights, nothing re-run: the components are the record.

    ``memory_label`` (MemPO's +1 / -1 grade of the decision's memories) replaces Hm when given,
    because it judges the selected memories against the gold answer directly."""
    if memory_label is not None:
        stored = replace(stored, components=replace(stored.components, hm=float(memory_label)))
    return stored.reweighted(weights)


@dataclass(frozen=True, slots=True)
class RewardConfig:
    """How signals become components; every threshold is documented in the module docstring."""

    weights: RewardWeights = field(default_factory=RewardWeights)
    version: str = REWARD_VERSION
    feedback_window: timedelta = timedelta(minutes=10)
    default_success: float = 0.5
    minor_error: float = 0.2
    serious_error: float = 0.75
    timeout_error: float = 0.5
    correction_severity: float = 1.0
    repeat_severity: float = 0.5
    latency_free_ms: float = 5_000.0
    latency_scale_ms: float = 30_000.0
    free_steps: int = 4
    step_scale: int = 8
    used_token_weight: float = 0.25
    unknown_token_weight: float = 0.5
    reuse_unit: float = 0.5

    def __post_init__(self) -> None:
        for name in (
            "minor_error",
            "serious_error",
            "timeout_error",
            "correction_severity",
            "repeat_severity",
            "latency_free_ms",
            "latency_scale_ms",
            "used_token_weight",
            "unknown_token_weight",
            "reuse_unit",
        ):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise FeedbackError(f"RewardConfig.{name} must be a finite non-negative number, got {value!r}")
        if self.latency_scale_ms == 0:
            raise FeedbackError("RewardConfig.latency_scale_ms must be positive")
        if not _is_number(self.step_scale) or self.step_scale <= 0:
            raise FeedbackError(f"RewardConfig.step_scale must be a positive number, got {self.step_scale!r}")
        if isinstance(self.free_steps, bool) or not isinstance(self.free_steps, int) or self.free_steps < 0:
            raise FeedbackError(f"RewardConfig.free_steps must be a non-negative integer, got {self.free_steps!r}")
        if not _is_number(self.default_success) or not -0.5 <= self.default_success <= 1.0:
            raise FeedbackError(f"RewardConfig.default_success must be in [-0.5, 1], got {self.default_success!r}")
        if not isinstance(self.version, str) or not 0 < len(self.version) <= _MAX_VERSION_LENGTH:
            raise FeedbackError(
                f"RewardConfig.version must be a text of 1 to {_MAX_VERSION_LENGTH} characters, got {self.version!r}"
            )
        if not isinstance(self.feedback_window, timedelta) or self.feedback_window < timedelta(0):
            raise FeedbackError(
                f"RewardConfig.feedback_window must be a non-negative timedelta, got {self.feedback_window!r}"
            )


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, value))


class CompositeReward:
    """Turns an episode and its feedback into a :class:`RewardBreakdown`."""

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config or RewardConfig()

    def score(self, episode: Episode, feedback: Iterable[Feedback] = ()) -> RewardBreakdown:
        fb = sorted((f for f in feedback if not f.late), key=lambda f: f.received_at)
        merged = _merge(fb)
        components = RewardComponents(
            s=self._success(merged),
            hm=self._hit(episode, merged, CandidateKind.MEMORY),
            hs=self._hit(episode, merged, CandidateKind.SKILL),
            ht=self._hit(episode, merged, CandidateKind.TOOL),
            e=self._errors(episode, fb),
            c=self._corrections(fb),
            l=self._latency(episode, merged),
            x=self._context_cost(episode, merged),
            u=self._reuse(episode, merged),
        )
        return RewardBreakdown(components, self.config.weights, self.config.version)

    # --- components

    def _success(self, m: _Merged) -> float:
        cfg = self.config
        if m.verdict is not None:
            s = m.verdict
        elif m.accepted is not None:
            s = 1.0 if m.accepted else 0.0
        else:
            s = cfg.default_success
        if m.timeout or m.repeat:
            s = min(s, 0.0)
        return s

    def _hit(self, episode: Episode, m: _Merged, kind: CandidateKind) -> float | None:
        offered = {sc.candidate.id for sel in episode.selections for sc in sel.offered if sc.candidate.kind is kind}
        if not offered:
            return None
        chosen = {c.id for sel in episode.selections for c in sel.chosen if c.kind is kind}
        helpful = (m.used | m.useful | m.relevant | set(episode.used_ids or ())) & offered
        hits = len(chosen & helpful)
        misses = len((m.relevant & offered) - chosen)
        if hits + misses == 0:
            return 0.0
        return (hits - misses) / (hits + misses)

    def _errors(self, episode: Episode, fb: Sequence[Feedback]) -> float:
        cfg = self.config
        total = 0.0
        failed: set[tuple[str, str]] = set()
        for step in episode.steps:
            if step.kind is not StepKind.TOOL or step.status == "ok":
                continue
            # a call that timed out has failed too: trying it again unchanged is the spec's
            # "repeating a failed action", however either attempt ended
            key = (step.name, repr(sorted(step.arguments.items())))
            if key in failed:
                total += cfg.serious_error
            else:
                total += cfg.timeout_error if step.status == "timeout" else cfg.minor_error
            failed.add(key)
        total += cfg.serious_error * sum(1 for f in fb if f.signals.explicit.tool_wrong)
        return _clip01(total)

    def _corrections(self, fb: Sequence[Feedback]) -> float:
        cfg = self.config
        total = 0.0
        for f in fb:
            severity = f.signals.explicit.correction_severity
            if f.signals.corrects:
                total += cfg.correction_severity if severity is None else severity
            if f.signals.implicit.repeat:
                total += cfg.repeat_severity
        return _clip01(total)

    def _latency(self, episode: Episode, m: _Merged) -> float:
        cfg = self.config
        if m.timeout or any(s.status == "timeout" for s in episode.steps):
            return 1.0
        given: Any = episode.metadata.get("latency_ms")
        latency = (
            float(given)
            if _is_number(given)
            else (sum(s.latency_ms for s in episode.steps) + sum(sel.latency_ms for sel in episode.selections))
        )
        steps = len(episode.steps)
        value = 0.5 * max(0.0, latency - cfg.latency_free_ms) / cfg.latency_scale_ms
        value += 0.5 * max(0, steps - cfg.free_steps) / cfg.step_scale
        return _clip01(value)

    def _context_cost(self, episode: Episode, m: _Merged) -> float:
        cfg = self.config
        known_used = m.used | m.useful | set(episode.used_ids or ())
        usage_known = episode.used_ids is not None or bool(m.used) or bool(m.useful)
        weighted = 0.0
        budget = 0
        for sel in episode.selections:
            budget += sel.context.budget.max_tokens or sum(sc.candidate.tokens for sc in sel.offered)
            for cand in sel.chosen:
                if cand.id in known_used:
                    weighted += cfg.used_token_weight * cand.tokens
                elif usage_known:
                    weighted += cand.tokens
                else:
                    weighted += cfg.unknown_token_weight * cand.tokens
        if budget <= 0:
            return 0.0
        return _clip01(weighted / budget)

    def _reuse(self, episode: Episode, m: _Merged) -> float:
        chosen = {c.id for sel in episode.selections for c in sel.chosen}
        return _clip01(self.config.reuse_unit * len(chosen & m.useful))


@dataclass(slots=True)
class _Merged:
    verdict: float | None = None
    accepted: bool | None = None
    timeout: bool = False
    repeat: bool = False
    used: set[str] = field(default_factory=set)
    useful: set[str] = field(default_factory=set)
    relevant: set[str] = field(default_factory=set)


def _merge(feedback: Sequence[Feedback]) -> _Merged:
    """Fold feedback in arrival order: the latest verdict wins, id sets accumulate."""
    m = _Merged()
    for f in feedback:
        signals = f.signals
        verdict = _verdict(signals)
        if verdict is not None:
            m.verdict = verdict
        if signals.programmatic.accepted is not None:
            m.accepted = signals.programmatic.accepted
        m.timeout = m.timeout or bool(signals.implicit.timeout)
        m.repeat = m.repeat or bool(signals.implicit.repeat)
        m.used.update(signals.implicit.used_ids or ())
        m.useful.update(signals.implicit.useful_ids or ())
        m.relevant.update(signals.implicit.relevant_ids or ())
    m.used.discard(STOP_ID)
    return m


def _verdict(signals: FeedbackSignals) -> float | None:
    """S from an explicit verdict, in order of precedence (see the module docstring)."""
    return signals.verdict
