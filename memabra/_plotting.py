"""matplotlib's pyplot for the charts memabra draws (``memabra bench --plot``, the offline
evaluation's ``--plot``), on the Agg backend.

matplotlib keeps a config and font-cache directory under the home directory; where that is not
writable (a read-only home in a container, a service account without one) it makes a temporary one
and logs a warning about it on every run. Only then, and only when ``MPLCONFIGDIR`` is not set, this
points ``MPLCONFIGDIR`` at a temporary directory of its own first (removed at exit), as matplotlib
would, without the warning; a writable default or a ``MPLCONFIGDIR`` of the user's is left alone.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["pyplot"]

logger = logging.getLogger("memabra")

_CONFIG_DIR_ENV = "MPLCONFIGDIR"


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (:class:`ImportError` when matplotlib is not installed)."""
    _config_dir_if_default_unwritable()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _default_dirs() -> list[Path] | None:
    """The directories matplotlib uses when ``MPLCONFIGDIR`` is not set (``None``: it cannot find the
    home directory). Windows is left to matplotlib (its default is under the user's profile)."""
    try:
        if sys.platform.startswith(("linux", "freebsd")):
            config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
            cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            return [Path(config, "matplotlib"), Path(cache, "matplotlib")]
        if sys.platform == "win32":
            return []
        return [Path.home() / ".matplotlib"]
    except RuntimeError:  # Path.home() without a home directory
        return None


def _writable(folder: Path) -> bool:
    try:
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)  # what matplotlib does with it first
    except OSError:
        return False
    return folder.is_dir() and os.access(folder, os.W_OK)


def _config_dir_if_default_unwritable() -> None:
    if os.environ.get(_CONFIG_DIR_ENV) or "matplotlib" in sys.modules:  # the user's, or already settled
        return
    defaults = _default_dirs()
    if defaults is not None and all(_writable(folder) for folder in defaults):
        return
    folder = tempfile.mkdtemp(prefix="memabra-matplotlib-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ[_CONFIG_DIR_ENV] = folder
    logger.debug(
        "matplotlib's default config directory is not writable: %s=%s for this process", _CONFIG_DIR_ENV, folder
    )
