"""What a local model directory must hold before :class:`MemPOScorer` loads it, checked without
torch, so the CLI can refuse a wrong ``--model`` before it reads the log."""

from __future__ import annotations

import os
from pathlib import Path

from memabra._errors import ConfigError

__all__ = ["check_model_directory"]

_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


def check_model_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`Path` when it is a directory holding ``config.json`` and weights
    (``*.safetensors`` or ``pytorch_model*.bin``); a :class:`ConfigError` naming what is missing
    otherwise. Models are never fetched from a hub."""
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError(
            f"model_path {str(directory)!r} is not a local directory holding a saved causal LM "
            "(models are never fetched from a hub)"
        )
    if not (directory / "config.json").is_file():
        raise ConfigError(f"model_path {str(directory)!r} holds no model: config.json is missing")
    if not any(any(directory.glob(pattern)) for pattern in _WEIGHT_PATTERNS):
        raise ConfigError(f"model_path {str(directory)!r} holds no weights (*.safetensors or pytorch_model*.bin)")
    return directory
