"""Are the logged propensities the probabilities the router draws with? (not a test)

A learned router is frozen after ``--learn`` decisions on a three-kind pool with a token budget;
then, for each of ``--requests`` requests, it chooses ``--draws`` times with different seeds. For
a deterministic target (the hybrid baseline), the importance weight of a draw is
``1 / prod(logged chosen probabilities)`` when the draw took the target's selection in the
target's order, else 0; if the logged propensities are the true ones its mean is 1 (up to the
sampling error printed with it). A mean weight far from 1 on a real log then means too few
decisions, not wrong propensities.

    python benchmarks/propensity_check.py --requests 4 --draws 4000

``--log URL`` audits a real episode log instead (only what the log holds): every logged pick is
drawn again from its logged distribution with the decision's logged seed (a mismatch means the
log does not hold what was drawn from), and, at every slot where the logged prefix still follows
the hybrid baseline's selection, the logged probability of hybrid's next pick is summed against how
often it was drawn, by probability band (calibrated propensities give observed counts within a
few standard deviations of the sums):

    python benchmarks/propensity_check.py --log sqlite:///demo.db
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from router_latency import WORDS, make_pool

from memabra import Budget, RoutingContext
from memabra.router import FeatureTable, HybridRouter, LinearRouter, Similarity
from memabra.router._sampling import draw_index
from memabra.storage import EpisodeLog

BANDS = (0.01, 0.05, 0.2, 0.9, 1.0)


def audit_log(url: str) -> None:
    hybrid = HybridRouter()
    redrawn_differently = 0
    expected = dict.fromkeys(BANDS, 0.0)
    variance = dict.fromkeys(BANDS, 0.0)
    observed = dict.fromkeys(BANDS, 0)
    slots = dict.fromkeys(BANDS, 0)
    with EpisodeLog(url) as log:
        decisions = 0
        for decision in log.iter_decisions():
            selection = decision.selection
            decisions += 1
            rng = np.random.default_rng(selection.seed)
            for draw in selection.slots:
                if draw.candidate_ids[draw_index(np.asarray(draw.probabilities), rng)] != draw.chosen_id:
                    redrawn_differently += 1
                    break
            candidates = [offer.candidate for offer in selection.offered]
            table = FeatureTable.from_rows(candidates, [offer.features for offer in selection.offered])
            own = hybrid.choose(selection.context, candidates, features=table, seed=0)
            for logged, target in zip(selection.slots, own.slots, strict=False):
                p = logged.probabilities[logged.candidate_ids.index(target.chosen_id)]
                band = next(b for b in BANDS if p < b or b == BANDS[-1])
                slots[band] += 1
                expected[band] += p
                variance[band] += p * (1.0 - p)
                observed[band] += logged.chosen_id == target.chosen_id
                if logged.chosen_id != target.chosen_id:
                    break
    print(f"{decisions} decisions; picks not reproduced from their logged distribution and seed: {redrawn_differently}")
    print(f"{'p of hybrid pick':>16s} {'slots':>6s} {'expected':>9s} {'drawn':>6s} {'sd':>5s}")
    lower = 0.0
    for band in BANDS:
        print(
            f"{f'[{lower:g}, {band:g})':>16s} {slots[band]:6d} {expected[band]:9.1f} {observed[band]:6d} "
            f"{math.sqrt(variance[band]):5.1f}"
        )
        lower = band


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learn", type=int, default=300, help="decisions learned (random rewards) before freezing")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--budget-tokens", type=int, default=300)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--log", default=None, help="audit this episode log's propensities instead")
    args = parser.parse_args()
    if args.log is not None:
        audit_log(args.log)
        return
    rng = np.random.default_rng(args.seed)
    similarity = Similarity()
    pool = make_pool(rng, args.candidates)
    budget = Budget(max_tokens=args.budget_tokens)
    router = LinearRouter(similarity=similarity)
    for _ in range(args.learn):
        context = RoutingContext(query=" ".join(rng.choice(WORDS, size=6)), user_id="u", budget=budget)
        selection = router.choose(context, pool)
        router.learn(selection, float(rng.random()), {cid: float(rng.random() < 0.3) for cid in selection.chosen_ids})
    hybrid = HybridRouter(similarity=similarity)
    print(f"linear router frozen after {args.learn} decisions; {args.draws} draws per request")
    print(f"{'request':>7s} {'hybrid picks':>12s} {'matched':>8s} {'mean weight':>12s} {'95% half-width':>15s}")
    for request in range(args.requests):
        context = RoutingContext(query=" ".join(rng.choice(WORDS, size=6)), user_id="u", budget=budget)
        table = router.featurize(context, pool)
        path = hybrid.choose(context, pool, features=table).chosen_ids
        weights = np.zeros(args.draws)
        for k in range(args.draws):
            selection = router.choose(context, pool, features=table, seed=1_000_000 + k)
            if selection.chosen_ids == path:
                weights[k] = 1.0 / math.prod(draw.chosen_probability for draw in selection.slots)
        half_width = 1.96 * float(weights.std()) / math.sqrt(args.draws)
        matched = int(np.count_nonzero(weights))
        print(f"{request:7d} {len(path):12d} {matched:8d} {weights.mean():12.3f} {half_width:15.3f}")


if __name__ == "__main__":
    main()
