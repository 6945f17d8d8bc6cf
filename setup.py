"""Maps the top-level ``router/``, ``storage/`` and ``evals/`` folders onto ``memabra.*``.

The bare names are taken on the package index, so they are installed only as subpackages of
``memabra``; ``pyproject.toml`` holds everything else.
"""

from setuptools import find_packages, setup

_MAPPED = {"memabra.router": "router", "memabra.storage": "storage", "memabra.evals": "evals"}


def _packages() -> list[str]:
    found = find_packages(include=["memabra", "memabra.*"])
    for dotted, folder in _MAPPED.items():
        found += [dotted] + [f"{dotted}.{sub}" for sub in find_packages(folder)]
    return found


setup(packages=_packages(), package_dir={"memabra": "memabra", **_MAPPED})
