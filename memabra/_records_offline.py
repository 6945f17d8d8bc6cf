"""Offline records: OPE estimates and MemPO's graded decisions. Re-exported by :mod:`memabra._records`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime

from memabra._errors import InvalidRecordError
from memabra._records_outcomes import RewardBreakdown, RewardWeights
from memabra._records_routing import (
    _EMPTY,
    JSONValue,
    Selection,
    _check_json_finite,
    _frozen_mapping,
    _require_finite,
    new_id,
    utcnow,
)


@dataclass(frozen=True, slots=True)
class OPEResult:
    """One estimator's estimate of one target policy's value on the log."""

    policy: str
    estimator: str
    value: float
    ci_low: float
    ci_high: float
    n_rounds: int
    alpha: float = 0.05
    snapshot_version: str | None = None
    details: Mapping[str, JSONValue] = field(default_factory=lambda: _EMPTY)
    run_id: str = field(default_factory=new_id)
    created_at: datetime = field(default_factory=utcnow)
    id: str = field(default_factory=new_id)

    def __post_init__(self) -> None:
        for name in ("value", "ci_low", "ci_high", "alpha"):
            _require_finite(f"OPEResult.{name}", getattr(self, name))
        _check_json_finite("OPEResult.details", self.details)
        object.__setattr__(self, "details", _frozen_mapping(self.details))

    @property
    def weights_recorded(self) -> bool:
        """Whether the run recorded the reward weights it scored under: runs stored before it did
        have no ``weights`` in their details, and are not to be compared as if they had."""
        return "weights" in self.details

    @property
    def reward_weights(self) -> Mapping[str, float] | None:
        """The weights the rewards were re-scored under (``ope log --weights``); ``None``: the
        totals as logged, or not recorded (:attr:`weights_recorded` tells which)."""
        weights = self.details.get("weights")
        return _in_order(weights) if isinstance(weights, Mapping) else None

    @property
    def weights_label(self) -> str:
        """The reward weights in words, as listings show them: ``as logged``, ``not recorded`` or
        each weight (``ws=1 wc=0.8 ...``)."""
        if not self.weights_recorded:
            return "not recorded"
        weights = self.reward_weights
        return "as logged" if weights is None else " ".join(f"{k}={weight_number(v)}" for k, v in weights.items())

    @property
    def weights_lines(self) -> tuple[str, ...]:
        """:attr:`weights_label`, and for ``as logged`` each reward scale the run read as it recorded
        it (``VERSION: ws=1 ...``): a ``memabra rewards recompute`` since re-totals the log, and "as
        logged" alone would then read as today's weights."""
        label = self.weights_label
        scales = self.details.get("reward_scales")
        if label != "as logged" or not isinstance(scales, (list, tuple)):
            return (label,)
        lines = [label]
        for scale in scales:
            weights = scale.get("weights") if isinstance(scale, Mapping) else None
            if not isinstance(weights, Mapping) or not isinstance(scale.get("version"), str):
                continue
            numbers = " ".join(f"{k}={weight_number(v)}" for k, v in _in_order(weights).items())
            lines.append(f"{scale['version']}: {numbers}")
        return tuple(lines)


def _in_order(weights: Mapping[str, JSONValue]) -> dict[str, float]:
    """The numeric weights in RewardWeights' own order: PostgreSQL's JSONB gives the keys back in an
    order of its own."""
    order = {f.name: i for i, f in enumerate(fields(RewardWeights))}
    given = sorted(weights.items(), key=lambda kv: (order.get(str(kv[0]), len(order)), str(kv[0])))
    return {str(k): float(v) for k, v in given if isinstance(v, (int, float))}


def weight_number(value: float) -> str:
    """A reward weight short (``0.35``), but never two different weights in the same words: ``:g``
    keeps six digits, and a weight set as 0.35 against one re-totalled as 0.3500001 would read the
    same on both sides of a "weights differ"."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


@dataclass(frozen=True, slots=True)
class LoggedDecision:
    """A logged decision as offline evaluation reads it: the selection, its episode's reward (None
    until one is recorded), the candidates the episode is known to have used (None when no
    outcome was reported; a chosen candidate outside it was injected but not used) and whether the
    reward is final (a provisional one may still change as feedback arrives). ``episode_id`` names
    the episode the decision was made in ("" when not read from a log); ``reward_at`` is when its
    reward was last computed (finalising recomputes it), so a reader can read the log as of a time."""

    selection: Selection
    reward: RewardBreakdown | None
    used_ids: frozenset[str] | None = None
    final: bool = False
    episode_id: str = ""
    reward_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class GoldDecision:
    """A logged decision whose gold answer is known: what MemPO grades."""

    id: str
    question: str
    selected: tuple[str, ...]
    candidates: tuple[str, ...]
    gold_answer: str


@dataclass(frozen=True, slots=True)
class MemoryQuality:
    """MemPO's label of a decision: P(gold | selected memories) against P(gold | every candidate);
    ``reward`` +1 when the selection does as well, else -1."""

    decision_id: str
    scorer: str
    p_selected: float
    p_all: float
    difference: float
    reward: int
    answer_tokens: int
    scored_at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        for name in ("p_selected", "p_all", "difference"):
            _require_finite(f"MemoryQuality.{name}", getattr(self, name))
        if self.reward not in (1, -1):
            raise InvalidRecordError(f"MemoryQuality.reward must be +1 or -1, got {self.reward!r}")
