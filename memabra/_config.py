"""Reward configuration from the constructor, a TOML file or the environment.

Precedence, highest first: explicit arguments, environment variables, the TOML file, the spec's
defaults. The TOML file is ``$MEMABRA_CONFIG`` or ``memabra.toml`` in the working directory::

    [reward]
    feedback_window_seconds = 600
    default_success = 0.5

    [reward.weights]
    ws = 1.0
    wc = 0.5

Environment: ``MEMABRA_REWARD_WEIGHTS="ws=1.0,wc=0.5"`` and ``MEMABRA_FEEDBACK_WINDOW_SECONDS``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from memabra._errors import ConfigError, InvalidRecordError
from memabra._records import RewardWeights
from memabra._reward import RewardConfig

__all__ = ["load_reward_config", "parse_weights"]

_WEIGHT_NAMES = ("ws", "wr", "we", "wc", "wl", "wx", "wu")


def parse_weights(text: str, base: RewardWeights | None = None) -> RewardWeights:
    """``"ws=1,wc=0.5"`` -> weights (unnamed ones keep ``base``'s, by default the spec's)."""
    values = (base or RewardWeights()).as_dict()
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or name not in _WEIGHT_NAMES:
            raise ConfigError(f"bad weight {part!r}: expected NAME=VALUE with NAME one of {', '.join(_WEIGHT_NAMES)}")
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"weight {name} is not a number: {raw!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"weight {name} must be finite, got {raw!r}")
        values[name] = value
    return _weights(values)


def _weights(values: Mapping[str, Any]) -> RewardWeights:
    unknown = set(values) - set(_WEIGHT_NAMES)
    if unknown:
        raise ConfigError(f"unknown reward weight(s): {', '.join(sorted(unknown))}")
    try:
        return RewardWeights(**values)
    except InvalidRecordError as exc:
        raise ConfigError(str(exc)) from None


def _window(seconds: Any, name: str) -> timedelta:
    """A feedback window from a number of seconds; a :class:`ConfigError` naming ``name`` otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{name} must be a finite non-negative number of seconds, got {seconds!r}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ConfigError(f"{name} is too large: {seconds!r} seconds") from None


def load_reward_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    weights: RewardWeights | None = None,
    **overrides: Any,
) -> RewardConfig:
    env = os.environ if environ is None else environ
    settings: dict[str, Any] = {}
    weight_values = RewardWeights().as_dict()

    file = Path(path) if path is not None else Path(env.get("MEMABRA_CONFIG", "memabra.toml"))
    if path is not None and not file.is_file():
        raise ConfigError(f"config file not found: {file}")
    if file.is_file():
        try:
            doc = tomllib.loads(file.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file} is not valid TOML: {exc}") from None
        section = doc.get("reward", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{file}: [reward] must be a table")
        file_weights = section.pop("weights", {})
        if not isinstance(file_weights, dict):
            raise ConfigError(f"{file}: [reward.weights] must be a table")
        weight_values.update(file_weights)
        if "feedback_window_seconds" in section:
            settings["feedback_window"] = _window(section.pop("feedback_window_seconds"), "feedback_window_seconds")
        settings.update(section)

    if "MEMABRA_REWARD_WEIGHTS" in env:
        weight_values = parse_weights(env["MEMABRA_REWARD_WEIGHTS"], _weights(weight_values)).as_dict()
    if "MEMABRA_FEEDBACK_WINDOW_SECONDS" in env:
        raw = env["MEMABRA_FEEDBACK_WINDOW_SECONDS"]
        try:
            seconds: Any = float(raw)
        except ValueError:
            raise ConfigError(f"MEMABRA_FEEDBACK_WINDOW_SECONDS is not a number: {raw!r}") from None
        settings["feedback_window"] = _window(seconds, "MEMABRA_FEEDBACK_WINDOW_SECONDS")

    settings.update(overrides)
    known = {f.name for f in dataclasses.fields(RewardConfig)} - {"weights"}
    unknown = set(settings) - known
    if unknown:
        raise ConfigError(f"unknown reward setting(s): {', '.join(sorted(unknown))}")
    final_weights = weights if weights is not None else _weights(weight_values)
    try:
        return RewardConfig(weights=final_weights, **settings)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid reward setting: {exc}") from None
