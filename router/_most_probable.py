"""The slate a router finds most probable for a request: what it would choose without exploring.

A draw may be an explored one (the log needs them); a person asking "what does this policy do
here?" wants the mode. Built on the :class:`~memabra.router.Router` contract alone
(``slot_probabilities``), so it holds for every router, restored or live.
"""

from __future__ import annotations

from dataclasses import replace

from memabra._records import STOP_ID, Selection, SlotDraw
from memabra.router._base import Router

__all__ = ["most_probable_slate"]


def most_probable_slate(router: Router, selection: Selection) -> tuple[str, ...]:
    """The chosen ids, in slot order, of the slate ``router`` finds most probable for
    ``selection``'s context and offered candidates: slot after slot (in the context's kind order,
    within the budget's slots and tokens, as the router fills them) the option of highest
    probability given the picks before it, until it finds stopping most probable. Ties go to the
    option listed first (the router's order).

    Each slot is asked as a logged slot whose earlier picks are forced to the modes found so far;
    ``selection``'s own draws are ignored."""
    offered = [sc.candidate for sc in selection.offered]
    tokens = {c.id: c.tokens for c in offered}
    budget = selection.context.budget
    remaining = budget.max_tokens
    draws: list[SlotDraw] = []
    picks: list[str] = []
    for kind in selection.context.kinds:
        open_ids = [c.id for c in offered if c.kind is kind]
        for _ in range(budget.slots_for(kind)):
            eligible = [cid for cid in open_ids if remaining is None or tokens[cid] <= remaining]
            if not eligible:
                break
            options = (*eligible, STOP_ID)
            # placeholder probabilities: the record needs a valid distribution, the router ignores it
            flat = tuple(1.0 / len(options) for _ in options)
            probe = SlotDraw(len(draws), kind, options, flat, STOP_ID, flat[-1])
            probabilities = router.slot_probabilities(replace(selection, slots=(*draws, probe)))[-1]
            best = max(range(len(options)), key=lambda i: (probabilities[i], -i))
            draws.append(SlotDraw(len(draws), kind, options, flat, options[best], flat[best]))
            if options[best] == STOP_ID:
                break
            picks.append(options[best])
            open_ids.remove(options[best])
            if remaining is not None:
                remaining -= tokens[options[best]]
    return tuple(picks)
