"""Why a learner's log does or does not support the hybrid baseline (not a test).

Replays a bench file with the learner (``vw`` or ``linear``, default constructor arguments), and for
every logged slot compares the logger's distribution with hybrid's teacher-forced choice; for every
decision compares the logged set with hybrid's own set on the same candidates::

    python benchmarks/support_diagnosis.py ../shared/data/bench/memory_customer.jsonl --logger vw
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from memabra import Selection
from memabra._records import STOP_ID
from memabra.evals.bench import load_rounds, run_router
from memabra.router import FeatureTable, HybridRouter, LinearRouter, Similarity, VWRouter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--logger", choices=("vw", "linear"), default="vw")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rounds = load_rounds(args.file)
    similarity = Similarity.default()
    hybrid = HybridRouter(similarity=similarity)
    cls = {"vw": VWRouter, "linear": LinearRouter}[args.logger]
    stats: collections.Counter[str] = collections.Counter()

    def record(selection: Selection, reward: object, round_: object) -> None:
        for draw, target in zip(selection.slots, hybrid.slot_probabilities(selection), strict=True):
            p = np.asarray(draw.probabilities)
            h, best = int(np.argmax(target)), int(np.argmax(p))
            kind = "stop" if draw.candidate_ids[best] == STOP_ID else "candidate"
            stats[f"slots: logger's best is a {kind}, hybrid's pick {'agrees' if h == best else 'differs'}"] += 1
            if h != best:
                stats[f"slots: hybrid's differing pick at p {'>= 1e-3' if p[h] >= 1e-3 else '< 1e-3'}"] += 1
        offered = [sc.candidate for sc in selection.offered]
        features = FeatureTable.from_rows(offered, [sc.features for sc in selection.offered])
        own = set(hybrid.choose(selection.context, offered, features=features).chosen_ids)
        stats[f"decisions: {len(own ^ set(selection.chosen_ids))} members differ from hybrid's set"] += 1
        stats[f"decisions: {len(selection.chosen_ids)} chosen"] += 1

    results, _ = run_router(
        lambda s: cls(seed=s, similarity=similarity), rounds, args.passes, args.seed, on_decision=record
    )
    print(f"first pass hit rate {np.mean([r.hit for r in results if r.pass_index == 0]):.3f}")
    for key, value in sorted(stats.items()):
        print(f"{value:6d}  {key}")


if __name__ == "__main__":
    main()
