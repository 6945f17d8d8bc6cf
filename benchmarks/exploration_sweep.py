"""Exploration trade-off (not a test): first-pass hit rate of the numpy learner against the effective
sample size its log gives for evaluating the hybrid baseline offline.

For each logged decision the importance weight of the hybrid policy is the product over slots of
``pi_hybrid(logged choice | logged prefix) / p_logged(logged choice)`` (teacher-forced with
``slot_probabilities``); ESS = (sum w)^2 / sum w^2, reported as a share of the decisions::

    python benchmarks/exploration_sweep.py FILE.jsonl --epsilons 0,0.01,0.02,0.05 --top-m 4
"""

from __future__ import annotations

import argparse

import numpy as np

from memabra.evals.bench import load_rounds, run_router
from memabra.router import HybridRouter, LinearRouter, Similarity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--epsilons", default="0,0.01,0.02,0.05")
    parser.add_argument("--top-m", default="4")
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rounds = load_rounds(args.file)
    similarity = Similarity.default()
    hybrid = HybridRouter(similarity=similarity)
    print("epsilon top_m first_pass hybrid_first_pass ess_share")
    base, _ = run_router(lambda s: HybridRouter(seed=s, similarity=similarity), rounds, 1, args.seed)
    hybrid_first = float(np.mean([r.hit for r in base]))
    for top_m in (int(m) for m in args.top_m.split(",")):
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            weights: list[float] = []

            def record(selection, reward, round_, weights=weights):  # type: ignore[no-untyped-def]
                w = 1.0
                for draw, target in zip(selection.slots, hybrid.slot_probabilities(selection), strict=True):
                    i = draw.candidate_ids.index(draw.chosen_id)
                    w *= target[i] / draw.chosen_probability
                weights.append(w)

            exploration = "greedy" if epsilon == 0 else "epsilon"
            factory = lambda s, e=epsilon, m=top_m, x=exploration: LinearRouter(  # noqa: E731
                seed=s, similarity=similarity, exploration=x, epsilon=e, top_m=m
            )
            results, _ = run_router(factory, rounds, args.passes, args.seed, on_decision=record)
            first = float(np.mean([r.hit for r in results if r.pass_index == 0]))
            w = np.array(weights)
            ess = float(w.sum() ** 2 / (w**2).sum()) / w.size if (w**2).sum() > 0 else 0.0
            print(f"{epsilon:.3f} {top_m} {first:.3f} {hybrid_first:.3f} {ess:.3f}", flush=True)


if __name__ == "__main__":
    main()
