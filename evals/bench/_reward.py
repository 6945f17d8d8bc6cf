"""The composite reward of a replayed bench round.

A bench round has no agent run, so only the terms a routing decision decides are set; the others
(E, C, L, U) are 0. With ``chosen`` the selected ids, ``relevant`` the round's ground truth and
``hit`` by the round's ``need`` rule (``any``: ``chosen ∩ relevant ≠ ∅``; ``all``: ``relevant ⊆ chosen``):

* ``S = 1`` on a hit (the agent had what it needed), else ``0``;
* ``H`` of the round's kind (``Hm``, ``Hs`` or ``Ht``) is the precision ``|chosen ∩ relevant| /
  |chosen|`` on a hit -- 1 for a clean hit, near 0 when much recall went unused -- and ``-1`` when
  the selection missed (a key candidate was left out: for ``need: all``, any one of them);
* ``X = tokens injected / B``, capped at 1, where the round's budget ``B`` is the token count of
  its ``slots`` largest candidates (what filling every slot could cost at most).

``R`` is :meth:`RewardComponents.total` under the spec's default :class:`RewardWeights`. The
per-candidate outcomes fed to the learners are 1 for a chosen relevant candidate, 0 otherwise; for
``need: all`` rounds the relevant candidates left out are reported as missing (the agent's failed call).
"""

from __future__ import annotations

from collections.abc import Sequence

from memabra._records import CandidateKind, RewardBreakdown, RewardComponents, RewardWeights
from memabra.evals.bench._data import BenchRound

__all__ = ["bench_budget_tokens", "bench_reward"]


def bench_budget_tokens(round_: BenchRound) -> int:
    largest = sorted((c.tokens for c in round_.candidates), reverse=True)[: max(round_.slots, 1)]
    return max(sum(largest), 1)


def bench_reward(round_: BenchRound, chosen: Sequence[str], weights: RewardWeights | None = None) -> RewardBreakdown:
    tokens_by_id = {c.id: c.tokens for c in round_.candidates}
    hits = sum(1 for cid in chosen if cid in round_.relevant)
    served = round_.is_hit(chosen)
    h = hits / len(chosen) if served else -1.0
    x = min(1.0, sum(tokens_by_id[cid] for cid in chosen) / bench_budget_tokens(round_))
    per_kind = {
        CandidateKind.MEMORY: "hm",
        CandidateKind.SKILL: "hs",
        CandidateKind.TOOL: "ht",
    }
    components = RewardComponents(s=1.0 if served else 0.0, x=x, **{per_kind[round_.kind]: h})
    return RewardBreakdown(components, weights or RewardWeights())
