"""memabra as a release ships it: a wheel and an sdist built from a copy of this checkout, the wheel
installed into a fresh virtualenv and used from outside the checkout, as a downstream developer
would (imports, the ``memabra`` console script, the shipped migrations and admin files, and
``mypy --strict`` on the README's Quickstart).

The fresh environment sees the dependencies already installed beside the running interpreter
through a ``.pth`` line (a plain path entry: the editable install's finder there is not run), so
nothing is downloaded. Skipped only where the build backend (setuptools) or pip is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"memabra": "memabra", "router": "memabra/router", "storage": "memabra/storage", "evals": "memabra/evals"}
# What a developer's checkout holds that no build should see (the copy leaves it out, as a clean
# clone would not have it).
_NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "artifacts",
    ".whl",
    ".gl",
    "*.db*",
)
STALE = "memabra/_removed_since_last_build.py"

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("setuptools", "pip")),
    reason="building the wheel offline needs setuptools and pip installed beside the tests",
)


@dataclass(frozen=True)
class Built:
    source: Path
    wheel: Path
    sdist: Path
    venv_python: Path
    venv_bin: Path


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    work = tmp_path_factory.mktemp("release")
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=_NOT_COPIED)
    # What an earlier build in this checkout left in build/lib: a module deleted since must not ship.
    (source / "build" / "lib" / STALE).parent.mkdir(parents=True)
    (source / "build" / "lib" / STALE).write_text("raise ImportError('left over from an old build')\n")
    dist = work / "dist"
    backend = "import sys, setuptools.build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"
    _run([sys.executable, "-c", backend, "build_sdist", str(dist)], cwd=source)
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), "."], source
    )
    (wheel,) = dist.glob("memabra-*.whl")
    (sdist,) = dist.glob("memabra-*.tar.gz")

    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work)
    venv_python = venv / "bin" / "python"
    site = Path(
        _run([str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work).strip()
    )
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_memabra_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    pip = [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "-q", "--no-deps", "--no-index"]
    _run([*pip, str(wheel)], cwd=work)
    return Built(source, wheel, sdist, venv_python, venv / "bin")


def test_the_wheel_ships_the_package_and_nothing_else(built: Built) -> None:
    names = set(zipfile.ZipFile(built.wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert tops == {"memabra", f"{built.wheel.name.split('-')[0]}-{built.wheel.name.split('-')[1]}.dist-info"}, tops
    assert STALE not in names, "a module left in build/lib by an earlier build shipped in the wheel"
    shipped = {n for n in names if not n.endswith(".pyc")}
    expected = set()
    for folder, inside in MAPPED.items():
        for path in (built.source / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                expected.add(f"{inside}/{path.relative_to(built.source / folder).as_posix()}")
    assert expected - shipped == set(), "source files missing from the wheel"
    extra = {n for n in shipped - expected if not n.split("/")[0].endswith(".dist-info")}
    assert extra == set(), "files in the wheel that are not in the package"
    for needed in (
        "memabra/py.typed",
        "memabra/storage/migrations/env.py",
        "memabra/storage/migrations/script.py.mako",
        "memabra/storage/migrations/versions/0001_initial.py",
        "memabra/_admin/templates/base.html",
        "memabra/_admin/static/admin.css",
    ):
        assert needed in names, needed
    info = zipfile.ZipFile(built.wheel)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "memabra = memabra._cli:main" in info.read(entry_points).decode()


def test_the_sdist_builds_the_same_wheel_and_holds_no_test_suite(built: Built, tmp_path: Path) -> None:
    with tarfile.open(built.sdist) as tar:
        members = [m.split("/", 1)[1] for m in tar.getnames() if "/" in m]
        if hasattr(tarfile, "data_filter"):  # 3.11.4 and later; warned about from 3.12 without it
            tar.extractall(tmp_path, filter="data")
        else:  # pragma: no cover
            tar.extractall(tmp_path)
    assert not [m for m in members if m.startswith(("tests/", "benchmarks/", "docs/", "scripts/"))], members
    for needed in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "storage/migrations/script.py.mako"):
        assert needed in members, needed
    (unpacked,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "."]
    _run(cmd, unpacked)
    (again,) = tmp_path.glob("memabra-*.whl")
    assert set(zipfile.ZipFile(again).namelist()) == set(zipfile.ZipFile(built.wheel).namelist())


_USE_INSTALLED = textwrap.dedent(
    """
    import importlib, importlib.util, json, pkgutil, sys
    from pathlib import Path

    import memabra

    site = Path(sys.argv[1])
    modules = [m.name for m in pkgutil.walk_packages(memabra.__path__, "memabra.") if ".migrations." not in m.name]
    outside = [m for m in modules if not Path(importlib.import_module(m).__file__).is_relative_to(site)]
    missing = [n for n in memabra.__all__ if getattr(memabra, n, None) is None]
    bare = [n for n in ("router", "storage", "evals") if importlib.util.find_spec(n) is not None]

    from starlette.testclient import TestClient

    with TestClient(memabra.create_admin_app("sqlite:///log.db", token="t" * 24)) as client:
        page = client.get("/login")
        css = client.get("/static/admin.css")
    print(json.dumps({"modules": len(modules), "outside": outside, "missing": missing, "bare": bare,
                      "login": [page.status_code, "<form" in page.text], "css": css.status_code}))
    """
)


def test_the_installed_wheel_imports_serves_and_migrates_outside_the_checkout(built: Built, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEMABRA_DB", "DATABASE_URL")}
    memabra = str(built.venv_bin / "memabra")
    assert _run([memabra, "--version"], tmp_path, env).strip() == "memabra 0.1.0"
    assert "Usage: memabra" in _run([memabra, "--help"], tmp_path, env)
    _run([memabra, "db", "upgrade", "--db", "sqlite:///log.db"], tmp_path, env)  # the shipped migrations
    current = json.loads(_run([memabra, "db", "current", "--db", "sqlite:///log.db", "--json", "-"], tmp_path, env))
    assert current["up_to_date"] is True, current

    where = "import memabra, os; print(os.path.dirname(memabra.__file__))"
    site = _run([str(built.venv_python), "-c", where], tmp_path, env).strip()
    out = json.loads(_run([str(built.venv_python), "-c", _USE_INSTALLED, site], tmp_path, env))
    assert out["modules"] > 100 and out["outside"] == [] and out["missing"] == [] and out["bare"] == [], out
    assert out["login"] == [200, True] and out["css"] == 200, out


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (the test extra)")
def test_the_readme_quickstart_type_checks_strictly_against_the_installed_wheel(built: Built, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (quickstart,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "quickstart.db" in b]
    (tmp_path / "first_agent.py").write_text(quickstart)
    cmd = [str(built.venv_python), "-m", "mypy", "--strict", "--no-incremental", "first_agent.py"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout
