"""Reward configuration from the constructor, a TOML file or the environment.

Precedence, highest first: explicit arguments, environment variables, the TOML file, the spec's
defaults. The TOML file is ``$MEMABRA_CONFIG`` or ``memabra.toml`` in the working directory::

    [reward]
    feedback_window_seconds = 600
    default_success = 0.5

    [reward.weights]
    ws = 1.0
    wc = 0.5

    [embeddings]
    model = "/models/bge-small"

Environment: ``MEMABRA_REWARD_WEIGHTS="ws=1.0,wc=0.5"``, ``MEMABRA_FEEDBACK_WINDOW_SECONDS`` and
``MEMABRA_EMBEDDING_MODEL`` (:func:`load_embedding_model`: the encoder every default router, recall,
``memabra bench`` and ``memabra memories search`` score with).

Anything mistyped is refused with a one-line :class:`ConfigError` naming where it came from: an
unknown table or key in the file, a file ``$MEMABRA_CONFIG`` names that is not there, a variable
set to nothing. A typo silently ignored would leave a setting at its default in production.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from memabra._environment import empty_variable_error, warn_unknown_variables
from memabra._errors import ConfigError, InvalidRecordError
from memabra._records import RewardWeights
from memabra._reward import RewardConfig

__all__ = [
    "CONFIG_ENV",
    "EMBEDDING_MODEL_ENV",
    "WEIGHTS_ENV",
    "WINDOW_ENV",
    "EmbeddingModelSetting",
    "load_embedding_model",
    "load_reward_config",
    "parse_weights",
]

CONFIG_ENV = "MEMABRA_CONFIG"
WEIGHTS_ENV = "MEMABRA_REWARD_WEIGHTS"
WINDOW_ENV = "MEMABRA_FEEDBACK_WINDOW_SECONDS"
EMBEDDING_MODEL_ENV = "MEMABRA_EMBEDDING_MODEL"
DEFAULT_CONFIG_FILE = "memabra.toml"

_TABLES = ("reward", "embeddings")
_EMBEDDINGS_KEYS = ("model",)

_WEIGHT_NAMES = ("ws", "wr", "we", "wc", "wl", "wx", "wu")
# The file's own key for the window (the record's field is a timedelta, not seconds).
_WINDOW_KEY = "feedback_window_seconds"


def _closest(name: str, known: Iterable[str]) -> str:
    """``"; did you mean X?"`` for the known name nearest a mistyped one, else nothing."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def parse_weights(text: str, base: RewardWeights | None = None) -> RewardWeights:
    """``"ws=1,wc=0.5"`` -> weights (unnamed ones keep ``base``'s, by default the spec's)."""
    values = (base or RewardWeights()).as_dict()
    named: set[str] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or name not in _WEIGHT_NAMES:
            raise ConfigError(
                f"bad weight {part!r}: expected NAME=VALUE with NAME one of {', '.join(_WEIGHT_NAMES)}"
                + _closest(name, _WEIGHT_NAMES)
            )
        if name in named:
            # "wc=0.5,wc=0.8" is an edit half made (or wx meant): which one was meant is a guess
            raise ConfigError(f"weight {name} is given twice in {text.strip()!r}")
        named.add(name)
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"weight {name} is not a number: {raw!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"weight {name} must be finite, got {raw!r}")
        values[name] = value
    return _weights(values)


def _weights(values: Mapping[str, Any]) -> RewardWeights:
    unknown = sorted(set(values) - set(_WEIGHT_NAMES))
    if unknown:
        raise ConfigError(
            f"unknown reward weight(s): {', '.join(unknown)} (known: {', '.join(_WEIGHT_NAMES)})"
            + _closest(unknown[0], _WEIGHT_NAMES)
        )
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


def _config_file(path: str | Path | None, env: Mapping[str, str]) -> Path | None:
    """The TOML file to read: ``path``, else ``$MEMABRA_CONFIG``, else ``memabra.toml`` here if there.
    A file that was named (by argument or variable) must exist: a mistyped mount path would
    otherwise leave every setting at its default without a word."""
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file not found: {file}")
        return file
    if CONFIG_ENV in env:
        named = env[CONFIG_ENV]
        if not named.strip():
            raise ConfigError(empty_variable_error(CONFIG_ENV, "the path of a TOML file"))
        file = Path(named)
        if not file.is_file():
            what = "is a folder, not a file" if file.is_dir() else "does not exist"
            raise ConfigError(f"${CONFIG_ENV} names {file}, which {what}")
        return file
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def _read_doc(file: Path) -> dict[str, Any]:
    """``file`` parsed, every problem a :class:`ConfigError` naming it; unknown tables are refused, not skipped."""
    try:
        doc = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file} is not UTF-8 text (a TOML file must be)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from None
    for key in sorted(set(doc) - set(_TABLES)):
        raise ConfigError(
            f"{file}: unknown table or key {key!r} (memabra reads [reward] and [embeddings] only)"
            + _closest(key, _TABLES)
        )
    return doc


def _read_file(file: Path) -> dict[str, Any]:
    """The ``[reward]`` settings of ``file`` (weights under ``"weights"``); unknown keys are refused.
    The ``[embeddings]`` table is checked too: a typo in it must stop an agent at start as one in
    ``[reward]`` does, although only :func:`load_embedding_model` reads it."""
    doc = _read_doc(file)
    _embeddings_model(file, doc)
    section = doc.get("reward", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{file}: [reward] must be a table")
    weights = section.get("weights", {})
    if not isinstance(weights, dict):
        raise ConfigError(f"{file}: [reward.weights] must be a table")
    known = _SETTING_NAMES | {_WINDOW_KEY, "weights"}
    for key in sorted(set(section) - known):
        raise ConfigError(f"{file}: unknown key {key!r} in [reward]{_closest(key, known)}")
    return section


def _embeddings_model(file: Path, doc: Mapping[str, Any]) -> str | None:
    """``[embeddings] model`` of ``file`` (``None`` where not given), checked."""
    section = doc.get("embeddings")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ConfigError(f"{file}: [embeddings] must be a table")
    for key in sorted(set(section) - set(_EMBEDDINGS_KEYS)):
        raise ConfigError(f"{file}: unknown key {key!r} in [embeddings]{_closest(key, _EMBEDDINGS_KEYS)}")
    model = section.get("model")
    if model is None:
        return None
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(
            f"{file}: [embeddings] model must be a model folder's path or a Hugging Face model id, got {model!r}"
        )
    return model.strip()


_SETTING_NAMES = frozenset(f.name for f in dataclasses.fields(RewardConfig)) - {"weights", "feedback_window"}


def load_reward_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    weights: RewardWeights | None = None,
    **overrides: Any,
) -> RewardConfig:
    """The reward configuration: arguments over environment over file over the spec's defaults.

    Every bad setting is a :class:`ConfigError` naming where it came from (the file, or the
    variable); an unknown ``MEMABRA_*`` variable is logged as a warning naming the closest known one.
    """
    env = os.environ if environ is None else environ
    warn_unknown_variables(env)
    settings: dict[str, Any] = {}
    weight_values = RewardWeights().as_dict()

    file = _config_file(path, env)
    if file is not None:
        section = _read_file(file)
        try:
            weight_values.update(section.pop("weights", {}))
            file_weights = _weights(weight_values)
            if _WINDOW_KEY in section:
                settings["feedback_window"] = _window(section.pop(_WINDOW_KEY), _WINDOW_KEY)
            settings.update(section)
            # checked here, so that an error names the file rather than surfacing after the merge
            RewardConfig(weights=file_weights, **settings)
        except (ConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"{file}: {exc}") from None

    if WEIGHTS_ENV in env:
        raw_weights = env[WEIGHTS_ENV]
        if not raw_weights.strip():
            raise ConfigError(empty_variable_error(WEIGHTS_ENV, "NAME=VALUE pairs such as wc=0.5,wx=0.1"))
        try:
            weight_values = parse_weights(raw_weights, _weights(weight_values)).as_dict()
        except ConfigError as exc:
            raise ConfigError(f"${WEIGHTS_ENV}: {exc}") from None
    if WINDOW_ENV in env:
        raw = env[WINDOW_ENV]
        try:
            seconds: Any = float(raw)
        except ValueError:
            raise ConfigError(f"{WINDOW_ENV} is not a number: {raw!r}") from None
        settings["feedback_window"] = _window(seconds, WINDOW_ENV)

    settings.update(overrides)
    unknown = sorted(set(settings) - _SETTING_NAMES - {"feedback_window"})
    if unknown:
        raise ConfigError(f"unknown reward setting(s): {', '.join(unknown)}{_closest(unknown[0], _SETTING_NAMES)}")
    final_weights = weights if weights is not None else _weights(weight_values)
    try:
        return RewardConfig(weights=final_weights, **settings)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid reward setting: {exc}") from None


@dataclass(frozen=True, slots=True)
class EmbeddingModelSetting:
    """The embedding model a deployment names, and where it was named (for its errors)."""

    model: str
    """A local folder holding a sentence-transformers model, or a Hugging Face model id."""
    source: str
    """``$MEMABRA_EMBEDDING_MODEL``, or the config file and its key."""


def load_embedding_model(
    path: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> EmbeddingModelSetting | None:
    """The embedding model named by ``$MEMABRA_EMBEDDING_MODEL``, else by ``[embeddings] model`` of the
    config file (found as :func:`load_reward_config` finds it), else ``None``: the bundled MiniLM.

    The file is read even when the variable is set, so that a typo in it is refused whichever wins.
    The model itself is checked where it is resolved (:func:`memabra.router.default_encoder`).
    """
    env = os.environ if environ is None else environ
    warn_unknown_variables(env)
    file = _config_file(path, env)
    from_file = _embeddings_model(file, _read_doc(file)) if file is not None else None
    if EMBEDDING_MODEL_ENV in env:
        raw = env[EMBEDDING_MODEL_ENV]
        if not raw.strip():
            raise ConfigError(
                empty_variable_error(
                    EMBEDDING_MODEL_ENV, "a sentence-transformers model's folder or a Hugging Face model id"
                )
            )
        return EmbeddingModelSetting(raw.strip(), f"${EMBEDDING_MODEL_ENV}")
    if from_file is not None:
        return EmbeddingModelSetting(from_file, f"{file}: [embeddings] model")
    return None
