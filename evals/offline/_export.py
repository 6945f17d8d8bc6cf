"""The episode log's decisions as JSON Lines, for offline evaluation outside memabra (Open Bandit
Pipeline's slate estimators, a notebook, a warehouse).

One object per decision, in time order, self-describing (``"format": "memabra.decision/1"``):

* the context: ``decision_id``, ``episode_id``, ``created_at`` (ISO 8601, UTC), ``user_id``,
  ``thread_id``, ``turn``, ``query``, ``kinds``, ``budget`` (``max_tokens`` and slots per kind);
* the logging policy: ``policy``, ``policy_version``, ``seed``, ``latency_ms``;
* ``candidates``: every candidate offered, chosen or not (the counterfactuals), with ``id``,
  ``kind``, ``text``, ``tokens``, ``score``, ``rank`` and the ``features`` the router saw;
* ``slots``: each slot's draw in order, with its full distribution (``candidate_ids`` and
  ``probabilities``, the stop option as ``"__stop__"``), ``chosen_id`` and ``chosen_probability``;
  ``propensity`` is their product;
* outcomes: ``used_ids`` (the chosen candidates the episode used; ``null`` when no outcome was
  reported) and ``reward`` (``null`` until one is stored): ``total``, ``final``, ``version``, the
  seven ``components`` (``hm``/``hs``/``ht``: H by kind) and the ``weights`` that gave the total.

A slate estimator reads it directly: the slate is the decision and a position is a slot.
``chosen_probability`` is the draw's probability *given the draws before it*: its running product
along ``slots`` is obp's cascade propensity (``pscore_cascade``) and its product over the slots the
joint one (``pscore``, the record's ``propensity``). It is not obp's ``pscore_item_position``, the
item's marginal probability at that position (a sum over every prefix that could precede it), except
at the first slot: independent IPS fed the conditional probabilities is biased.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from memabra._episode_document import candidate_fields, slot_fields
from memabra._records import LoggedDecision, RewardBreakdown

if TYPE_CHECKING:
    from memabra.storage import EpisodeLog

__all__ = ["EXPORT_FORMAT", "decision_record", "export_decisions"]

EXPORT_FORMAT = "memabra.decision/1"


def decision_record(decision: LoggedDecision) -> dict[str, Any]:
    """One logged decision as the JSON object :func:`export_decisions` writes."""
    sel = decision.selection
    ctx = sel.context
    return {
        "format": EXPORT_FORMAT,
        "decision_id": sel.id,
        "episode_id": decision.episode_id,
        "created_at": sel.created_at.isoformat(),
        "user_id": ctx.user_id,
        "thread_id": ctx.thread_id,
        "turn": ctx.turn,
        "query": ctx.query,
        "kinds": [k.value for k in ctx.kinds],
        "budget": {
            "max_tokens": ctx.budget.max_tokens,
            "slots": {k.value: n for k, n in ctx.budget.slots.items()},
        },
        "policy": sel.policy,
        "policy_version": sel.policy_version,
        "seed": sel.seed,
        "latency_ms": sel.latency_ms,
        "candidates": [{**candidate_fields(sc), "features": dict(sc.features)} for sc in sel.offered],
        "slots": [slot_fields(d) for d in sel.slots],
        "propensity": sel.propensity,
        "used_ids": None if decision.used_ids is None else sorted(decision.used_ids),
        "reward": None if decision.reward is None else _reward(decision.reward, final=decision.final),
    }


def _reward(reward: RewardBreakdown, *, final: bool) -> dict[str, Any]:
    return {
        "total": reward.total,
        "final": final,
        "version": reward.version,
        "components": reward.components.as_dict(),
        "weights": reward.weights.as_dict(),
    }


def export_decisions(
    log: EpisodeLog,
    out: TextIO,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    user_id: str | None = None,
    final_only: bool = False,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write every logged decision in ``[since, until)`` (``user_id``'s only, when given) to
    ``out``, one JSON object per line, in time order and flat memory (the log is streamed);
    ``final_only`` skips decisions whose reward is missing or not final yet. Returns how many were
    written; ``progress(written)`` is called every 1,000."""
    written = 0
    for decision in log.iter_decisions(since=since, until=until, user_id=user_id):
        if final_only and not (decision.final and decision.reward is not None):
            continue
        out.write(json.dumps(decision_record(decision), ensure_ascii=False, allow_nan=False, separators=(",", ":")))
        out.write("\n")
        written += 1
        if progress is not None and written % 1000 == 0:
            progress(written)
    if progress is not None:
        progress(written)
    return written
