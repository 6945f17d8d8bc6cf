"""What a router remembers of the outcomes of recurring requests.

Users ask the same thing again -- often because the first answer missed. A router that injected
five memories for a request, none of which helped, should not inject the same five when the
request comes back; one that found the memory that helped should reach for it first. The usage
features (``chosen_log``, ``helped_rate``, ...) cannot say this: they count over all requests.

A request is the user id and the query's analysed tokens (:func:`memabra.router._text.analyze`:
case, punctuation and stop words aside, the same words in the same order). For each of the most
recent ``capacity`` requests the memory counts, per candidate, the selections of this router that
injected it with a local outcome, and how many of those it helped (outcome at least 0.5). The
counts enter the features as ``failed_here`` and ``helped_here``
(:func:`memabra.router._features.featurize`), so they are logged with every decision, replayed
exactly by offline evaluation, and learned from like any feature. Only local outcomes count: a
slate-level reward says nothing about one candidate.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from memabra._errors import SnapshotError
from memabra._records import RoutingContext, Selection
from memabra.router._features import CandidateStats
from memabra.router._text import analyze

__all__ = ["RequestMemory", "request_key"]


def request_key(context: RoutingContext) -> str:
    """A short stable digest of the user id and the query's analysed tokens."""
    text = context.user_id + "\x1f" + " ".join(analyze(context.query))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class RequestMemory:
    """Per-request, per-candidate ``[times chosen, times helped]``, least recently seen forgotten
    first beyond ``capacity`` requests (0: remembers nothing)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._requests: OrderedDict[str, dict[str, list[int]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._requests)

    def stats(self, context: RoutingContext) -> dict[str, CandidateStats]:
        """The counts for ``context``'s request, by candidate id (empty for a new request)."""
        counts = self._requests.get(request_key(context)) if self._requests else None
        if not counts:
            return {}
        return {cid: CandidateStats(chosen, helped) for cid, (chosen, helped) in counts.items()}

    def record(self, selection: Selection, outcomes: Mapping[str, float] | None) -> None:
        """Count the local outcomes of ``selection`` (already validated by the caller)."""
        if not outcomes or self._capacity == 0:
            return
        key = request_key(selection.context)
        counts = self._requests.pop(key, None) or {}
        for cid, outcome in outcomes.items():
            entry = counts.setdefault(cid, [0, 0])
            entry[0] += 1
            entry[1] += 1 if outcome >= 0.5 else 0
        self._requests[key] = counts
        while len(self._requests) > self._capacity:
            self._requests.popitem(last=False)

    def state(self) -> list[Any]:
        """JSON-ready contents, oldest request first."""
        return [[key, counts] for key, counts in self._requests.items()]

    def restore(self, state: object) -> None:
        """Replace the contents with a :meth:`state`; raises :class:`SnapshotError` when malformed."""
        if not isinstance(state, list):
            raise SnapshotError(f"snapshot request memory must be a list, got {type(state).__name__}")
        requests: OrderedDict[str, dict[str, list[int]]] = OrderedDict()
        for item in state:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict)):
                raise SnapshotError(f"snapshot request memory has a malformed entry: {item!r:.80}")
            counts: dict[str, list[int]] = {}
            for cid, pair in item[1].items():
                valid = (
                    isinstance(pair, list)
                    and len(pair) == 2
                    and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair)
                    and pair[1] <= pair[0]
                )
                if not valid:
                    raise SnapshotError(f"snapshot request memory has bad counts for {cid!r}: {pair!r}")
                counts[str(cid)] = [pair[0], pair[1]]
            requests[item[0]] = counts
        while len(requests) > self._capacity:
            requests.popitem(last=False)
        self._requests = requests
