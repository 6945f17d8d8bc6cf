"""Maps the top-level ``router/``, ``storage/`` and ``evals/`` folders onto ``memabra.*``.

The bare names are taken on the package index, so they are installed only as subpackages of
``memabra``; ``pyproject.toml`` holds everything else.
"""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

_MAPPED = {"memabra.router": "router", "memabra.storage": "storage", "memabra.evals": "evals"}


def _packages() -> list[str]:
    found = find_packages(include=["memabra", "memabra.*"])
    for dotted, folder in _MAPPED.items():
        found += [dotted] + [f"{dotted}.{sub}" for sub in find_packages(folder)]
    return found


class _FreshBuildPy(build_py):
    """Copies the package into an emptied ``build/lib/memabra``: setuptools only adds to what an
    earlier build left there, so a module deleted or renamed since (or a file of another branch)
    would ship in the next wheel built in this checkout (``pip wheel .``, ``pip install .``)."""

    def run(self) -> None:
        if not self.editable_mode:
            shutil.rmtree(Path(self.build_lib) / "memabra", ignore_errors=True)
        super().run()


setup(
    packages=_packages(),
    package_dir={"memabra": "memabra", **_MAPPED},
    cmdclass={"build_py": _FreshBuildPy},
)
