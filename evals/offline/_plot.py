"""PNG charts of offline-evaluation estimates with their intervals (matplotlib, the plots extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memabra._errors import ConfigError
from memabra._plotting import pyplot
from memabra._records import OPEResult

__all__ = ["is_supported", "plot_estimates", "row_label"]

# point and bar colours: a supported estimate in blue, an unsupported one in grey, so that a narrow
# interval the verdict rejects does not read like an answer
_SUPPORTED = ("#2b6cb0", "#90cdf4")
_UNSUPPORTED = ("#a0aec0", "#e2e8f0")


def is_supported(result: OPEResult) -> bool:
    """The verdict on this row: the target's for its recommended estimate, else the estimator's own
    (an evaluation's results carry both in ``details``; a result without them counts as supported)."""
    details = result.details
    if details.get("recommended"):
        return bool(details.get("supported", True))
    return bool(details.get("estimator_supported", True))


def row_label(result: OPEResult) -> str:
    """``policy · estimator``, starred where it is the recommended estimate, marked where unsupported."""
    star = " *" if result.details.get("recommended") else ""
    verdict = "" if is_supported(result) else " (unsupported)"
    return f"{result.policy} · {result.estimator}{star}{verdict}"


def plot_estimates(
    results: Sequence[OPEResult], path: str | Path, *, logging_value: float | None = None, title: str = ""
) -> Path:
    """One row per (policy, estimator): the estimate with its interval, the recommended one starred,
    unsupported ones in grey and marked; the logging policy's value as a dashed line."""
    try:
        plt = pyplot()
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'memabra[plots]'") from None
    if not results:
        raise ConfigError("no estimates to plot")
    labels = [row_label(r) for r in results]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(results) + 1.6))
    for y, result in enumerate(results):
        # an estimate outside its bounds (an unsupported target's raw value) draws no negative bar
        low, high = max(result.value - result.ci_low, 0.0), max(result.ci_high - result.value, 0.0)
        point, bar = _SUPPORTED if is_supported(result) else _UNSUPPORTED
        ax.errorbar(
            [result.value], [y], xerr=[[low], [high]], fmt="o", color=point, ecolor=bar, elinewidth=3, capsize=4
        )
    ys = list(range(len(results)))
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
