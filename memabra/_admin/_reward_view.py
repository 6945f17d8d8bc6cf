"""The episode page's reward card: each term of the composite reward with its weight, its
contribution and its scale (the component's range and what it measures, in a few words), so a
value such as "X 0.182" reads without the README at hand."""

from __future__ import annotations

from dataclasses import dataclass

from memabra._records import COMPONENT_RANGES, RewardBreakdown
from memabra._reward import RewardConfig

__all__ = ["RewardLine", "reward_lines"]


@dataclass(frozen=True, slots=True)
class RewardLine:
    """One term of R = ws*S + wr*H - we*E - wc*C - wl*L - wx*X + wu*U, with ``scale``: the
    component's range and what it measures, so a value reads without the README at hand."""

    symbol: str
    name: str
    value: float | None
    weight_name: str | None
    weight: float | None
    sign: str
    contribution: float | None
    sub: bool = False
    scale: str = ""


# (attribute, symbol, name, weight). The ranges are the records' (COMPONENT_RANGES) and the
# thresholds the reward config's (_meanings): the one copy of each is where the reward is computed.
_TERMS: tuple[tuple[str, str, str, str], ...] = (
    ("s", "S", "success", "ws"),
    ("h", "H", "hit (mean of the kinds present)", "wr"),
    ("hm", "Hm", "memory hit", ""),
    ("hs", "Hs", "skill hit", ""),
    ("ht", "Ht", "tool hit", ""),
    ("e", "E", "tool errors", "we"),
    ("c", "C", "correction", "wc"),
    ("l", "L", "latency and steps", "wl"),
    ("x", "X", "context cost", "wx"),
    ("u", "U", "reuse", "wu"),
)
_NEGATIVE = {"e", "c", "l", "x"}


def _g(value: float) -> str:
    """A number as a reader writes it: ``0.5``, ``5``, ``−0.5`` (a typographic minus)."""
    return f"{value:g}".replace("-", "−")


def _meanings(config: RewardConfig) -> dict[str, str]:
    """What each component measures, in a few words, with ``config``'s thresholds (the module
    docstring of :mod:`memabra._reward` and the README's reward table say it in full)."""
    c = config
    return {
        "s": f"the latest verdict or rating, else whether it was accepted, else {_g(c.default_success)}",
        "h": "(hits − misses) / (hits + misses), the mean of the kinds offered",
        "hm": "hits and misses among the memories",
        "hs": "hits and misses among the skills",
        "ht": "hits and misses among the tools",
        "e": (
            f"{_g(c.minor_error)} per failed tool call, {_g(c.serious_error)} per repeated failure or "
            f"wrong tool, {_g(c.timeout_error)} per time-out"
        ),
        "c": f"{_g(c.correction_severity)} per correction, {_g(c.repeat_severity)} per repeated question",
        "l": f"half for latency past {_g(c.latency_free_ms / 1000)} s, half for steps past {c.free_steps}",
        "x": "injected tokens against the token budget",
        "u": f"{_g(c.reuse_unit)} per chosen memory reused instead of asking again",
    }


def _scale(attr: str, meaning: str) -> str:
    low, high = COMPONENT_RANGES["hm" if attr == "h" else attr]
    return f"{_g(low)}…{_g(high)}: {meaning}"


def reward_lines(reward: RewardBreakdown, config: RewardConfig | None = None) -> list[RewardLine]:
    """The reward's terms, each with its weight, contribution and scale (``config``: the one
    that scores feedback, for the thresholds the scales name; default: the library's)."""
    comps, weights = reward.components, reward.weights
    meanings = _meanings(config or RewardConfig())
    lines = []
    for attr, symbol, name, weight_name in _TERMS:
        value = comps.h if attr == "h" else getattr(comps, attr)
        scale = _scale(attr, meanings[attr])
        if not weight_name:
            lines.append(RewardLine(symbol, name, value, None, None, "", None, sub=True, scale=scale))
            continue
        weight = float(getattr(weights, weight_name))
        sign = "-" if attr in _NEGATIVE else "+"
        # "+ 0.0" turns a negative zero into a plain one: "-0.000" would read as a penalty.
        contribution = (-1.0 if sign == "-" else 1.0) * weight * float(value) + 0.0
        lines.append(RewardLine(symbol, name, float(value), weight_name, weight, sign, contribution, scale=scale))
    return lines
