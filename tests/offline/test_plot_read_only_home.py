"""Charts drawn with a home directory that cannot be written (a read-only container, a service
account): matplotlib would make a temporary config directory and log a warning about it on every
run; memabra points MPLCONFIGDIR at one of its own first, silently, and only then."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

_DRAW = """
import os, sys
from memabra import OPEResult
from memabra.evals.offline import plot_estimates
out = plot_estimates([OPEResult("linear", "snips", 0.5, 0.4, 0.6, 100)], sys.argv[1])
assert out.stat().st_size > 0
print("MPLCONFIGDIR=" + os.environ.get("MPLCONFIGDIR", ""))
"""


def _home_not_writable(tmp_path: Path) -> Path:
    """A home directory this process cannot write: read-only, or (as root, who writes anywhere) one
    under a plain file, where nothing can be made."""
    if os.geteuid() == 0:
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("")
        return blocker / "home"
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)
    return home


def _draw(tmp_path: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", _DRAW, str(tmp_path / "chart.png")],
        env={**clean, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_chart_with_a_read_only_home_draws_without_a_warning(tmp_path: Path) -> None:
    done = _draw(tmp_path, _home_not_writable(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # matplotlib's "not a writable directory" / "created a temporary cache directory"
    assert "memabra-matplotlib-" in done.stdout
    assert (tmp_path / "chart.png").stat().st_size > 0


def test_a_writable_home_and_a_set_mplconfigdir_are_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = _draw(tmp_path, home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MPLCONFIGDIR="  # matplotlib's own default, under the home
    assert (home / ".config" / "matplotlib").is_dir()

    # the user's MPLCONFIGDIR wins, whatever the home
    mine = tmp_path / "mine"
    mine.mkdir()
    (tmp_path / "other").mkdir()
    done = _draw(tmp_path, _home_not_writable(tmp_path / "other"), MPLCONFIGDIR=str(mine))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"MPLCONFIGDIR={mine}"
