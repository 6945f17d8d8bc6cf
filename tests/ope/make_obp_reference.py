"""Freeze obp 0.5.7's outputs on a few seeded array sets into tests/ope/data/.

obp is not a dependency (it pins old numpy/scipy/torch); run this in a throwaway environment:

    python3 -m venv /tmp/obpenv
    /tmp/obpenv/bin/pip install --no-deps --ignore-requires-python obp==0.5.7
    /tmp/obpenv/bin/pip install numpy scipy scikit-learn "pandas<3" matplotlib seaborn tqdm pyyaml torch
    /tmp/obpenv/bin/python tests/ope/make_obp_reference.py

It needs only numpy and obp (not memabra). ``test_ope_obp_reference.py`` then checks memabra
against the frozen values without obp, and ``test_ope_obp_live.py`` re-runs obp when importable.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

DATA = Path(__file__).resolve().parent / "data"

# (obp class name, hyperparameters); the fixture stores both, the tests map them to memabra
BANDIT_CONFIGS: list[tuple[str, dict[str, float]]] = [
    ("InverseProbabilityWeighting", {}),
    ("InverseProbabilityWeighting", {"lambda_": 2.0}),
    ("SelfNormalizedInverseProbabilityWeighting", {}),
    ("DirectMethod", {}),
    ("DoublyRobust", {}),
    ("DoublyRobust", {"lambda_": 2.0}),
    ("SelfNormalizedDoublyRobust", {}),
    ("SwitchDoublyRobust", {}),
    ("SwitchDoublyRobust", {"lambda_": 2.0}),
    ("DoublyRobustWithShrinkage", {"lambda_": 1.0}),
    ("DoublyRobustWithShrinkage", {"lambda_": 100.0}),
    ("DoublyRobustWithShrinkage", {"lambda_": math.inf}),
]
# obp divides 0 by 0 in DRos at lambda_ = 0 where a weight is 0, so that case runs only where
# every weight is positive
DROS_ZERO = ("DoublyRobustWithShrinkage", {"lambda_": 0.0})
SLATE_CONFIGS = ["SlateStandardIPS", "SlateIndependentIPS", "SlateRewardInteractionIPS"]


def _policy(rng: np.random.Generator, n: int, n_actions: int, len_list: int) -> NDArray[np.float64]:
    dist = rng.dirichlet(np.ones(n_actions), size=(n, len_list))  # (n, len_list, n_actions)
    return np.ascontiguousarray(dist.transpose(0, 2, 1))


def bandit_sets() -> dict[str, dict[str, NDArray[Any]]]:
    """Three seeded logs: one slot; three positions; a deterministic policy with zero weights."""
    sets: dict[str, dict[str, NDArray[Any]]] = {}
    rng = np.random.default_rng(7)
    n, n_actions = 300, 5
    sets["single"] = {
        "action": rng.integers(0, n_actions, size=n),
        "reward": rng.binomial(1, 0.4, size=n).astype(np.float64),
        "pscore": rng.uniform(0.05, 1.0, size=n),
        "action_dist": _policy(rng, n, n_actions, 1),
        "estimated_rewards_by_reg_model": rng.uniform(0.0, 1.0, size=(n, n_actions, 1)),
    }
    rng = np.random.default_rng(11)
    n, n_actions, len_list = 240, 4, 3
    sets["positions"] = {
        "action": rng.integers(0, n_actions, size=n),
        "reward": rng.normal(1.0, 0.5, size=n),
        "pscore": rng.uniform(0.1, 1.0, size=n),
        "position": rng.integers(0, len_list, size=n),
        "action_dist": _policy(rng, n, n_actions, len_list),
        "estimated_rewards_by_reg_model": rng.normal(1.0, 0.3, size=(n, n_actions, len_list)),
    }
    rng = np.random.default_rng(13)
    n, n_actions = 200, 6
    chosen = rng.integers(0, n_actions, size=n)
    sets["deterministic"] = {
        "action": rng.integers(0, n_actions, size=n),
        "reward": rng.normal(0.0, 1.0, size=n),
        "pscore": np.full(n, 1.0 / n_actions),
        "action_dist": np.eye(n_actions)[chosen][:, :, None],
        "estimated_rewards_by_reg_model": rng.normal(0.0, 0.5, size=(n, n_actions, 1)),
    }
    return sets


def slate_sets() -> dict[str, dict[str, NDArray[Any]]]:
    """Two seeded slate logs in obp's long format (factorised per-slot policies)."""
    sets: dict[str, dict[str, NDArray[Any]]] = {}
    for name, seed, n_slates, len_list, n_items in (("slate3", 17, 200, 3, 4), ("slate2", 19, 150, 2, 5)):
        rng = np.random.default_rng(seed)
        behaviour = rng.dirichlet(np.ones(n_items), size=(n_slates, len_list))
        evaluation = rng.dirichlet(np.ones(n_items), size=(n_slates, len_list))
        items = np.array([[rng.choice(n_items, p=behaviour[i, k]) for k in range(len_list)] for i in range(n_slates)])
        slates, slots = np.arange(n_slates)[:, None], np.arange(len_list)[None, :]
        b_item, e_item = behaviour[slates, slots, items], evaluation[slates, slots, items]
        b_cascade, e_cascade = b_item.cumprod(axis=1), e_item.cumprod(axis=1)
        sets[name] = {
            "slate_id": np.repeat(np.arange(n_slates), len_list),
            "position": np.tile(np.arange(len_list), n_slates),
            "reward": rng.binomial(1, 0.3, size=n_slates * len_list).astype(np.float64),
            "pscore": np.repeat(b_cascade[:, -1], len_list),
            "evaluation_policy_pscore": np.repeat(e_cascade[:, -1], len_list),
            "pscore_item_position": b_item.ravel(),
            "evaluation_policy_pscore_item_position": e_item.ravel(),
            "pscore_cascade": b_cascade.ravel(),
            "evaluation_policy_pscore_cascade": e_cascade.ravel(),
        }
    return sets


def bandit_configs(set_name: str) -> list[tuple[str, dict[str, float]]]:
    return BANDIT_CONFIGS + ([DROS_ZERO] if set_name != "deterministic" else [])


def run_obp(
    bandit: dict[str, dict[str, NDArray[Any]]], slate: dict[str, dict[str, NDArray[Any]]]
) -> tuple[list[dict[str, Any]], dict[str, NDArray[np.float64]]]:
    """obp's estimates (and per-round rewards) for every set and configuration."""
    import obp.ope as obp_ope

    records: list[dict[str, Any]] = []
    round_rewards: dict[str, NDArray[np.float64]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # obp's pandas calls warn under new pandas
        for set_name, arrays in bandit.items():
            for index, (class_name, params) in enumerate(bandit_configs(set_name)):
                estimator = getattr(obp_ope, class_name)(**params)
                value = float(estimator.estimate_policy_value(**arrays))
                position = arrays.get("position", np.zeros(arrays["action"].shape[0], dtype=int))
                per_round = estimator._estimate_round_rewards(**{**arrays, "position": position})
                key = f"{set_name}__{index}"
                round_rewards[key] = np.asarray(per_round, dtype=np.float64)
                records.append(
                    {
                        "kind": "bandit",
                        "set": set_name,
                        "key": key,
                        "estimator": class_name,
                        "params": params,
                        "value": value,
                    }
                )
        for set_name, arrays in slate.items():
            len_list = int(arrays["position"].max()) + 1
            for class_name in SLATE_CONFIGS:
                estimator = getattr(obp_ope, class_name)(len_list=len_list)
                value = float(estimator.estimate_policy_value(**arrays))
                records.append(
                    {
                        "kind": "slate",
                        "set": set_name,
                        "key": f"{set_name}__{class_name}",
                        "estimator": class_name,
                        "params": {},
                        "value": value,
                    }
                )
    return records, round_rewards


def main() -> None:
    import obp

    bandit, slate = bandit_sets(), slate_sets()
    records, round_rewards = run_obp(bandit, slate)
    stored = {
        f"{set_name}__{name}": value
        for set_name, arrays in {**bandit, **slate}.items()
        for name, value in arrays.items()
    }
    stored.update({f"rr__{key}": value for key, value in round_rewards.items()})
    DATA.mkdir(exist_ok=True)
    np.savez_compressed(DATA / "obp_reference.npz", **stored)
    meta = {
        "obp_version": obp.__version__,
        "numpy_version": np.__version__,
        "bandit_sets": sorted(bandit),
        "slate_sets": sorted(slate),
        "records": records,
    }
    (DATA / "obp_reference.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(records)} reference values to {DATA}")


if __name__ == "__main__":
    main()
