from __future__ import annotations

import subprocess
import sys
from importlib import resources


def test_subpackages_import_under_memabra_and_bare_names_do_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import importlib.util, memabra.router, memabra.storage, memabra.evals;"
        "print([importlib.util.find_spec(n) is None for n in ('router', 'storage', 'evals')])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[True, True, True]"


def test_migrations_ship_inside_the_package() -> None:
    versions = resources.files("memabra.storage") / "migrations" / "versions"
    names = [p.name for p in versions.iterdir()]
    assert "0001_initial.py" in names
    assert (resources.files("memabra.storage") / "migrations" / "env.py").is_file()


def test_importing_memabra_does_not_import_torch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = "import sys, memabra, memabra.router, memabra.storage, memabra.evals; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
