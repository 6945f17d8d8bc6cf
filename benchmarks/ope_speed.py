"""Time IPS, SNIPS and DR on 1,000,000 logged rounds: memabra in memory, memabra streamed in
chunks, and obp 0.5.7 on the same arrays when it is importable.

    python benchmarks/ope_speed.py [--rounds 1000000] [--actions 10] [--repeats 5] [--chunk 100000]

obp is not a memabra dependency; to include it, run this with the interpreter of a throwaway
environment that has obp and memabra (see tests/ope/make_obp_reference.py), e.g.
``/tmp/obpenv/bin/python benchmarks/ope_speed.py``. Each figure is the median wall time of
``--repeats`` runs, input validation included, memabra's and obp's runs taking turns; the ratio
is obp's time over memabra's.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from memabra.evals import ope


def _median_seconds(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, tuple[float, float]]:
    """Median wall time and value of each run. The runs take turns, repeat by repeat, so a burst of
    load on a shared machine slows all of them alike instead of one whole column."""
    times: dict[str, list[float]] = {key: [] for key in runs}
    values = dict.fromkeys(runs, float("nan"))
    for _ in range(repeats):
        for key, run in runs.items():
            start = time.perf_counter()
            values[key] = run()
            times[key].append(time.perf_counter() - start)
    return {key: (statistics.median(times[key]), values[key]) for key in runs}


def _arrays(n_rounds: int, n_actions: int) -> dict[str, np.ndarray]:
    log = ope.SyntheticBandit(n_actions=n_actions, dim_context=5).sample(n_rounds, random_state=0)
    return {
        "action": log.arrays.action,
        "reward": log.arrays.reward,
        "pscore": log.arrays.pscore,
        "action_dist": log.arrays.action_dist,
        "estimated_rewards_by_reg_model": np.clip(log.expected_reward + 0.05, 0.0, 1.0),
    }


def _obp_estimators() -> dict[str, Any] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import obp.ope as obp_ope
    except ImportError:
        return None
    return {
        "ipw": obp_ope.InverseProbabilityWeighting(),
        "snipw": obp_ope.SelfNormalizedInverseProbabilityWeighting(),
        "dr": obp_ope.DoublyRobust(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1_000_000)
    parser.add_argument("--actions", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=100_000)
    options = parser.parse_args()

    arrays = _arrays(options.rounds, options.actions)
    ours = {
        "ipw": ope.InverseProbabilityWeighting(),
        "snipw": ope.SelfNormalizedInverseProbabilityWeighting(),
        "dr": ope.DoublyRobust(),
    }
    theirs = _obp_estimators()
    print(f"{options.rounds:,} rounds, {options.actions} actions, len_list 1; median of {options.repeats} runs")
    print(f"{'estimator':<10}{'memabra':>12}{'streamed':>12}{'obp 0.5.7':>12}{'obp/memabra':>13}{'|diff|':>10}")

    def streamed(estimator: ope.BanditEstimator) -> float:
        stream = ope.StreamingEstimate(estimator)
        for batch in ope.iter_round_batches(ope.BanditArrays(**arrays), options.chunk):
            stream.update(batch)
        return stream.estimate_policy_value()

    for name, estimator in ours.items():
        runs: dict[str, Callable[[], float]] = {
            "memabra": lambda e=estimator: e.estimate_policy_value(**arrays),
            "streamed": lambda e=estimator: streamed(e),
        }
        if theirs is not None:
            runs["obp"] = lambda e=theirs[name]: float(e.estimate_policy_value(**arrays))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # obp under new numpy and pandas
            timed = _median_seconds(runs, options.repeats)
        (in_memory, value), (chunked, _) = timed["memabra"], timed["streamed"]
        row = f"{name:<10}{in_memory:>11.3f}s{chunked:>11.3f}s"
        if "obp" in timed:
            obp_time, obp_value = timed["obp"]
            row += f"{obp_time:>11.3f}s{obp_time / in_memory:>12.2f}x{abs(obp_value - value):>10.1e}"
        else:
            row += f"{'n/a':>12}{'n/a':>13}{'n/a':>10}"
        print(row)

    def all_three() -> float:
        batches = ope.iter_round_batches(ope.BanditArrays(**arrays), options.chunk)
        return next(iter(ope.estimate_streaming(list(ours.values()), batches).values())).value

    one_pass, _ = _median_seconds({"all": all_three}, options.repeats)["all"]
    print(f"all three in one streamed pass (with normal intervals): {one_pass:.3f}s")
    if theirs is not None:
        print("obp/memabra above 1x: memabra is faster (memabra also checks finiteness, ranges and q_hat)")
    if theirs is None:
        print("obp is not importable here; run with an interpreter that has obp to compare")


if __name__ == "__main__":
    main()
