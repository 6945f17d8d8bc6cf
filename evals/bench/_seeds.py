"""Several seeds of one bench: the spread a single seed hides.

A bench file of a few dozen rounds answers "does the router beat hybrid?" with a quantum of one
round: one seed's round order, unseen split and exploration draws can move a hit rate by a round
or two either way. :func:`summarize_seeds` puts the per-seed reports of :func:`run_bench` side by
side and gives, per router and metric, the median and the range over the seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from memabra._errors import ConfigError

__all__ = ["parse_seeds", "seed_metrics", "summarize_seeds"]

# per-run figures the summary leaves out: timings on a shared machine say nothing about the seed
_PER_RUN = ("decision_ms_p50", "decision_ms_p99")


def seed_metrics(report: dict[str, Any], router: str) -> tuple[str, ...]:
    """The numbers of ``router``'s block in a single-seed report that the summary spreads over
    seeds: every scalar but the decision times (the learning curve is a list, kept per run)."""
    block = report["routers"][router]
    return tuple(
        key
        for key, value in block.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and key not in _PER_RUN
    )


# a range wider than this is a typo rather than a plan: 1,000 seeds of the multi-turn file are
# about two days of CPU
_MAX_SEEDS = 1000


def parse_seeds(spec: str) -> tuple[int, ...]:
    """``"0-4"``, ``"0,3,7"`` or both (``"0-2,9"``) as the seeds in the order given, each once.

    Raises :class:`ConfigError` naming the part that is not a seed or a range of seeds."""
    seeds: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        low, dash, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise ConfigError(f"seed {part!r} is not a seed (0, 1, …) or a range of seeds (0-4)") from None
        if first < 0 or last < first:
            raise ConfigError(f"seed range {part!r} must run from a seed of at least 0 up to a later one")
        seeds.extend(s for s in range(first, last + 1) if s not in seeds)
        if len(seeds) > _MAX_SEEDS:
            raise ConfigError(f"seeds {spec!r} name more than {_MAX_SEEDS} seeds")
    if not seeds:
        raise ConfigError(f"seeds {spec!r} name no seed; give e.g. 0-4 or 0,3,7")
    return tuple(seeds)


def summarize_seeds(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The JSON document of a multi-seed bench: the shared header, ``seeds``, every seed's report
    under ``runs`` (each the single-seed document, unchanged) and, under ``summary``, per router and
    metric of :func:`seed_metrics`, ``{"median", "min", "max", "values"}`` over the seeds (a metric
    a run could not compute, NaN, stays NaN in ``values`` and is left out of the statistics)."""
    if not reports:
        raise ValueError("summarize_seeds needs at least one report")
    header = {key: reports[0][key] for key in ("file", "rounds", "passes")}
    routers = list(reports[0]["routers"])
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for name in routers:
        summary[name] = {}
        for metric in seed_metrics(reports[0], name):
            values = [float(report["routers"][name][metric]) for report in reports]
            finite = [v for v in values if math.isfinite(v)]
            summary[name][metric] = {
                "median": float(np.median(finite)) if finite else math.nan,
                "min": min(finite) if finite else math.nan,
                "max": max(finite) if finite else math.nan,
                "values": values,
            }
    return {**header, "seeds": [report["seed"] for report in reports], "runs": list(reports), "summary": summary}
