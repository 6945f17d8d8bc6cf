"""Each name ``memabra`` loads lazily, and each public package, works as the first thing a process
touches.

A module that imports cleanly after others may still sit on an import cycle that breaks it when
it comes first: ``memabra.episode_from_document`` once failed in a fresh process because its module
imported storage, whose package imported back into the half-loaded module. Importing everything
in one process hides that, so each lazy module and public package gets a fresh interpreter here.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import memabra

# Interpreters started at once: enough to overlap their start-up, few enough for a 2-core runner.
_WORKERS = 4
_PUBLIC_PACKAGES = (
    "memabra.router",
    "memabra.storage",
    "memabra.evals",
    "memabra.evals.bench",
    "memabra.evals.mempo",
    "memabra.evals.offline",
    "memabra.evals.ope",
    "memabra.evals.simulator",
)


def _first_touches() -> list[str]:
    """One statement per lazy module (its first name) and per public package."""
    first_name: dict[str, str] = {}
    for name, target in memabra._LAZY.items():
        first_name.setdefault(target.partition(":")[0], name)
    statements = [f"import memabra; memabra.{name}" for name in first_name.values()]
    return statements + [f"import {package}" for package in _PUBLIC_PACKAGES]


def _failure(statement: str) -> str | None:
    done = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True)
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return f"{statement}: {lines[-1] if lines else done.returncode}"


def test_each_lazy_name_and_public_package_loads_first_in_a_fresh_process() -> None:
    with ThreadPoolExecutor(_WORKERS) as pool:
        failed = [f for f in pool.map(_failure, _first_touches()) if f is not None]
    assert not failed, "fails as the first import of a process:\n" + "\n".join(failed)
