"""Short reprs for the records a notebook displays: a :class:`~memabra.Selection` names what was
chosen, with what probability, out of how many candidates, instead of every candidate's features
(tens of kilobytes for a hundred candidates); a :class:`~memabra.PolicySnapshot` gives its model's
size, not its bytes (megabytes for a Vowpal Wabbit model)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memabra._records_outcomes import PolicySnapshot
    from memabra._records_routing import Selection

__all__ = ["selection_repr", "snapshot_repr"]

# The longest query a selection's repr shows whole.
_QUERY_CHARS = 80


def selection_repr(sel: Selection) -> str:
    ctx = sel.context
    query = ctx.query if len(ctx.query) <= _QUERY_CHARS else ctx.query[: _QUERY_CHARS - 1] + "…"
    draws = ", ".join(f"{d.kind.value} {d.chosen_id} p={d.chosen_probability:.4g}" for d in sel.slots)
    return (
        f"Selection(id={sel.id!r}, policy_version={sel.policy_version!r}, user_id={ctx.user_id!r}, "
        f"thread_id={ctx.thread_id!r}, turn={ctx.turn}, query={query!r}, offered=<{len(sel.offered)} candidates>, "
        f"slots=[{draws}], propensity={sel.propensity:.4g}, "
        f"created_at={sel.created_at!r})"
    )


def snapshot_repr(snap: PolicySnapshot) -> str:
    return (
        f"PolicySnapshot(policy={snap.policy!r}, version={snap.version!r}, status={snap.status!r}, "
        f"parent={snap.parent!r}, created_at={snap.created_at!r}, model=<{len(snap.model)} bytes>, "
        f"learner_args={dict(snap.learner_args)!r}, metrics={dict(snap.metrics)!r})"
    )
