"""View models: what the templates show, computed from records, so templates stay logic-free.

The counterfactual of a decision has two parts. *Missed* candidates are high-scoring ones left
out: those the router's logged score ranks above the worst-ranked chosen candidate of their kind,
or, for a kind of which nothing was chosen, the kind's best candidate. *Now* is what the current policy (an injected
:data:`CurrentPolicy`) picks for the same context and candidates, compared with what was logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from markupsafe import Markup, escape

from memabra._admin._ope_views import ope_chart, ope_rows, ope_target
from memabra._admin._policy import CurrentPolicy
from memabra._errors import MemabraError
from memabra._records import (
    STOP_ID,
    CandidateKind,
    Episode,
    Feedback,
    OPEResult,
    RewardWeights,
    Selection,
)
from memabra.storage import FAILURE_CAUSES, KindShare, PolicyVersionStats, RewardPoint

__all__ = [
    "FAILURE_TITLES",
    "CandidateView",
    "DecisionView",
    "SlotRow",
    "chart_payload",
    "choose_bucket",
    "code_spans",
    "decision_views",
    "feedback_summary",
    "filters_query",
    "format_difference",
    "format_number",
    "format_probability",
    "format_time",
    "left_out_reason",
    "ope_target",
    "truncate",
    "url_part",
]

logger = logging.getLogger("memabra")


@dataclass(frozen=True, slots=True)
class CandidateView:
    """One offered candidate as the decision table shows it.

    ``score`` is the router's logged ranking score; ``prior`` its hybrid similarity prior (the
    logged ``hyb_z`` feature, ``None`` when not logged) and ``learner`` what the router added to
    it (``score - prior``). A learner (``linear``, ``vw``) logs its cost at the first slot of the
    candidate's kind in the prior's units, so ``learner`` is its learned residual on that scale;
    the similarity baselines log the prior itself (``learner`` 0). ``probability`` is the probability of the slot that drew it, or for a
    candidate left out, of the first slot of its kind that offered it (``None`` if no slot did,
    e.g. over budget). ``reason`` says why a candidate was left out (empty when chosen).
    """

    id: str
    kind: str
    text: str
    tokens: int
    features: tuple[tuple[str, float], ...]
    score: float
    rank: int
    probability: float | None
    chosen: bool
    slot: int | None
    missed: bool
    chosen_now: bool | None
    prior: float | None = None
    learner: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SlotRow:
    """One slot draw of a decision, with whether it explored."""

    slot: int
    kind: str
    chosen_id: str
    chosen_probability: float
    options: int
    max_probability: float
    explored: bool
    chosen_text: str = ""


@dataclass(frozen=True, slots=True)
class DecisionView:
    selection: Selection
    candidates: tuple[CandidateView, ...]
    slots: tuple[SlotRow, ...]
    missed: tuple[CandidateView, ...]
    chosen_ids: tuple[str, ...]
    now_ids: tuple[str, ...] | None
    now_error: str | None

    @property
    def now_added(self) -> tuple[str, ...]:
        return tuple(i for i in self.now_ids or () if i not in self.chosen_ids)

    @property
    def now_dropped(self) -> tuple[str, ...]:
        if self.now_ids is None:
            return ()
        return tuple(i for i in self.chosen_ids if i not in self.now_ids)

    @property
    def texts(self) -> dict[str, str]:
        """Candidate id to text, so the template shows what was chosen rather than an id."""
        return {c.id: c.text for c in self.candidates}

    @property
    def budget_slots(self) -> str:
        slots = self.selection.context.budget.slots
        return ", ".join(f"{kind.value} {n}" for kind, n in slots.items())


def decision_views(episode: Episode, current_policy: CurrentPolicy | None) -> list[DecisionView]:
    return [_decision_view(sel, current_policy) for sel in episode.selections]


def _decision_view(sel: Selection, current_policy: CurrentPolicy | None) -> DecisionView:
    chosen_slot = {d.chosen_id: d for d in sel.slots if d.chosen_id != STOP_ID}
    first_offer: dict[str, float] = {}
    for offer in sel.slots:
        for cid, p in zip(offer.candidate_ids, offer.probabilities, strict=True):
            first_offer.setdefault(cid, p)
    now_ids, now_error = _policy_now(sel, current_policy)
    # A candidate is "missed" when it ranks above this: the worst chosen rank of its kind, or 1
    # (only the best counts) for a kind of which nothing was chosen.
    worst_chosen: dict[CandidateKind, int] = {}
    for sc in sel.offered:
        if sc.candidate.id in chosen_slot:
            worst_chosen[sc.candidate.kind] = max(worst_chosen.get(sc.candidate.kind, 0), sc.rank)
    has_slots = {kind: kind in sel.context.kinds and sel.context.budget.slots_for(kind) > 0 for kind in CandidateKind}
    views = []
    for sc in sel.offered:
        cand = sc.candidate
        draw = chosen_slot.get(cand.id)
        prior = sc.features.get("hyb_z")
        views.append(
            CandidateView(
                id=cand.id,
                kind=cand.kind.value,
                text=cand.text,
                tokens=cand.tokens,
                features=tuple(sorted((k, float(v)) for k, v in sc.features.items())),
                score=sc.score,
                rank=sc.rank,
                probability=draw.chosen_probability if draw is not None else first_offer.get(cand.id),
                chosen=draw is not None,
                slot=draw.slot if draw is not None else None,
                missed=draw is None and has_slots[cand.kind] and sc.rank < worst_chosen.get(cand.kind, 1),
                chosen_now=None if now_ids is None else cand.id in now_ids,
                prior=None if prior is None else float(prior),
                learner=None if prior is None else sc.score - float(prior),
                reason=""
                if draw is not None
                else left_out_reason(sel, cand.id, cand.kind, cand.tokens, has_slots[cand.kind]),
            )
        )
    # Chosen first in slot order, then the rest by kind and rank: the table reads like the slate.
    views.sort(key=lambda v: (not v.chosen, v.slot if v.slot is not None else 0, v.kind, v.rank))
    texts = {v.id: v.text for v in views}
    slots = tuple(
        SlotRow(
            slot=d.slot,
            kind=d.kind.value,
            chosen_id=d.chosen_id,
            chosen_probability=d.chosen_probability,
            options=len(d.candidate_ids),
            max_probability=max(d.probabilities),
            explored=d.chosen_probability < max(d.probabilities) - _EXPLORED_TOLERANCE,
            chosen_text="stop" if d.chosen_id == STOP_ID else texts.get(d.chosen_id, d.chosen_id),
        )
        for d in sel.slots
    )
    missed = tuple(sorted((v for v in views if v.missed), key=lambda v: -v.score))
    return DecisionView(sel, tuple(views), slots, missed, sel.chosen_ids, now_ids, now_error)


# A draw explored when it picked an option this much less probable than its slot's most probable.
_EXPLORED_TOLERANCE = 1e-9


def left_out_reason(sel: Selection, candidate_id: str, kind: CandidateKind, tokens: int, kind_has_slots: bool) -> str:
    """Why a candidate the router offered was not chosen, read from the logged slot draws.

    In order: its kind was not routed; no slot of its kind offered it (over the token budget); a
    slot explored (drew something less probable than it); the router stopped while it was still
    open; every slot of its kind was filled by options the router found more probable.
    """
    texts = {sc.candidate.id: sc.candidate.text for sc in sel.offered}
    if not kind_has_slots:
        return f"no {kind.value} slots in this decision's budget"
    draws = [d for d in sel.slots if d.kind is kind]
    offered_in = [d for d in draws if candidate_id in d.candidate_ids]
    if not offered_in:
        if not draws:
            return f"no {kind.value} slot was drawn"
        return f"over the token budget: {tokens} tokens did not fit what was left"
    for d in offered_in:
        own = d.probabilities[d.candidate_ids.index(candidate_id)]
        if d.chosen_probability < own - _EXPLORED_TOLERANCE:
            odds = f"(p {format_probability(d.chosen_probability)}) over it (p {format_probability(own)})"
            if d.chosen_id == STOP_ID:
                return f"stop, by exploration: slot {d.slot} drew the stop option {odds}"
            return f"exploration: slot {d.slot} drew “{truncate(texts.get(d.chosen_id, d.chosen_id), 60)}” {odds}"
    last = offered_in[-1]
    if last.chosen_id == STOP_ID:
        own = last.probabilities[last.candidate_ids.index(candidate_id)]
        stop, its = format_probability(last.chosen_probability), format_probability(own)
        return f"stop: the router stopped at slot {last.slot} (p(stop) {stop}, its p {its})"
    budget = sel.context.budget.slots_for(kind)
    if len(draws) >= budget:
        return f"slots full: all {budget} {kind.value} slots went to options the router found more probable"
    return "the router found the drawn options more probable"


def _policy_now(sel: Selection, current_policy: CurrentPolicy | None) -> tuple[tuple[str, ...] | None, str | None]:
    if current_policy is None:
        return None, "no current policy is configured for this admin view"
    try:
        return tuple(current_policy(sel)), None
    except MemabraError as exc:
        return None, str(exc)
    except Exception as exc:  # a broken policy must not take the review page down with it
        logger.exception("current policy failed on decision %s", sel.id)
        return None, f"the current policy failed: {type(exc).__name__}: {exc}"


def feedback_summary(feedback: Feedback) -> str:
    """The payload as compact JSON (the template escapes it)."""
    return json.dumps(dict(feedback.payload), sort_keys=True, default=str)


def _short_labels(buckets: Sequence[str]) -> list[str]:
    """Bucket keys as axis labels: within one day, every label after the first drops the date."""
    if len(buckets) < 2 or len({b[:10] for b in buckets}) > 1 or len(buckets[0]) <= 10:
        return list(buckets)
    return [buckets[0], *(b[11:] for b in buckets[1:])]


def code_spans(text: str) -> Markup:
    """``text`` escaped, with each `backquoted` span (a command a message suggests) as code."""
    parts = str(escape(text)).split("`")
    if len(parts) % 2 == 0:  # an unpaired backquote: leave the text as it is
        return Markup("`".join(parts))
    return Markup("".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)))


def choose_bucket(first: datetime | None, last: datetime | None) -> str:
    """Points a second apart for a log of a few minutes (a demo, a load test), a minute apart for
    the last few hours (a new deployment's first look), hourly ones for a few days, daily ones
    otherwise: at most about 300 points a series."""
    if first is None or last is None:
        return "day"
    span = last - first
    if span < timedelta(minutes=5):
        return "second"
    if span < timedelta(hours=3):
        return "minute"
    return "hour" if span < timedelta(days=3) else "day"


def chart_payload(
    points: Sequence[RewardPoint],
    stats: Sequence[PolicyVersionStats],
    shares: Sequence[KindShare],
    ope: Sequence[OPEResult],
    reward_range: tuple[float, float] | None = None,
    *,
    bucket: str = "day",
) -> dict[str, Any]:
    """The data the policies page's charts draw, as plain JSON (read by static/admin.js).
    ``reward_range``: the lowest and highest total reward (default: the default weights');
    ``bucket``: the time each point of the reward chart averages over (:func:`choose_bucket`)."""
    buckets = sorted({p.bucket for p in points})
    versions = sorted({p.policy_version for p in points})
    by_key = {(p.policy_version, p.bucket): p.mean_reward for p in points}
    reward = {
        "labels": _short_labels(buckets),
        "series": [{"label": v, "data": [by_key.get((v, b)) for b in buckets]} for v in versions],
        "bucket": bucket,
        "axis": f"time (UTC), one point per {bucket}",
    }
    kinds = [k.value for k in CandidateKind]
    share_versions = sorted({s.policy_version for s in shares})
    share_by_key = {(s.policy_version, s.kind): s.share for s in shares}
    kind_chart = {
        "labels": share_versions,
        "series": [{"label": k, "data": [share_by_key.get((v, k), 0.0) for v in share_versions]} for k in kinds],
    }
    ordered_stats = sorted(stats, key=lambda st: st.policy_version)
    exploration = {
        "labels": [st.policy_version for st in ordered_stats],
        "exploration": [st.exploration_rate for st in ordered_stats],
        "min_propensity": [st.min_propensity for st in ordered_stats],
    }
    return {
        "reward": reward,
        "kinds": kind_chart,
        "exploration": exploration,
        "ope": ope_chart(ope_rows(ope), reward_range or RewardWeights().total_range()),
    }


def format_time(value: datetime | None) -> str:
    """``value`` in UTC, to the second; one without a zone is UTC already, as the log stores times
    (``astimezone`` would read it as the host's local time)."""
    if value is None:
        return ""
    utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return utc.strftime("%Y-%m-%d %H:%M:%S")


def format_number(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}"


# Below this a probability is written in scientific notation: 0.0011 and 0.0000 read as the same.
_SMALL_PROBABILITY = 1e-3


def format_probability(value: float | None) -> str:
    """Three significant digits, in scientific notation below 0.001 (``0.00110``, ``9.97e-04``,
    ``1.13e-06``): fixed decimals would print a 1-in-a-million draw as 0.0000."""
    if value is None:
        return "–"
    if value == 0:
        return "0"
    if abs(value) < _SMALL_PROBABILITY:
        return f"{value:.2e}"
    return f"{value:#.3g}"


def format_difference(value: float) -> str:
    """A signed difference of probabilities (MemPO's ``p_selected - p_all``), as
    :func:`format_probability` writes its size: ``+0.0120``, ``-3.10e-05``, ``0``."""
    if value == 0:
        return "0"
    return ("+" if value > 0 else "-") + format_probability(abs(value))


def truncate(text: str | None, limit: int = 120) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


_FAILURE_MEANINGS = {
    "recursion_limit": "the run ran out of its recursion_limit",
    "model_error": "a model call raised",
    "tool_error": "a tool call raised",
    "superseded": "a new message on the thread superseded it before it finished",
}
FAILURE_TITLES: Mapping[str | None, str] = {
    **{cause: f"failed turn: {_FAILURE_MEANINGS[cause]}" for cause in FAILURE_CAUSES},
    None: "failed turn: its feedback names no cause",
}
"""What each failure badge on the episodes page says on hover: the feedback's cause word is kept
short in the row, so its meaning is spelt out here. Keyed by every cause, in the filter's order
(the page's cause selector lists them from here), and ``None`` for a cause the feedback leaves out."""


def filters_query(values: Mapping[str, str], **overrides: str | None) -> str:
    """A query string of the non-empty filter values (for the next-page link)."""
    merged = {**values, **overrides}
    return urlencode({k: v for k, v in merged.items() if v})


def url_part(value: object) -> str:
    """``value`` as one URL path segment or query value: every reserved character encoded, ``/``,
    ``?`` and ``#`` included (ids may hold any of them)."""
    return quote(str(value), safe="")
