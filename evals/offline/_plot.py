"""PNG charts of offline-evaluation estimates with their intervals (matplotlib, the plots extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memabra._errors import ConfigError
from memabra._records import OPEResult

__all__ = ["plot_estimates"]


def plot_estimates(
    results: Sequence[OPEResult], path: str | Path, *, logging_value: float | None = None, title: str = ""
) -> Path:
    """One row per (policy, estimator): the estimate with its interval; the logging policy's
    value as a dashed line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'memabra[plots]'") from None
    if not results:
        raise ConfigError("no estimates to plot")
    labels = [f"{r.policy} · {r.estimator}" for r in results]
    values = [r.value for r in results]
    # an estimate outside its bounds (an unsupported target's raw value) draws no negative bar
    lows = [max(r.value - r.ci_low, 0.0) for r in results]
    highs = [max(r.ci_high - r.value, 0.0) for r in results]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(results) + 1.6))
    ys = list(range(len(results)))
    ax.errorbar(values, ys, xerr=[lows, highs], fmt="o", color="#2b6cb0", ecolor="#90cdf4", elinewidth=3, capsize=4)
    if logging_value is not None:
        ax.axvline(logging_value, color="#c53030", linestyle="--", label=f"logging policy {logging_value:+.3f}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"estimated reward ({int(round((1 - results[0].alpha) * 100))}% interval)")
    ax.set_title(title or "offline policy evaluation", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
