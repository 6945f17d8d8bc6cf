"""The default SQLite path (``sqlite:///memabra.db``, relative) in a working directory this
process may not write: a container whose root file system is read-only, a service started in
``/``. Opening the log there gives memabra's own error naming the file's whole path, the cause and
what to do, never sqlite3's bare ``unable to open database file`` (a SQLAlchemy error with a link),
and a refusal names the file, not only the relative URL that says nothing of where it is.

Root writes any directory whatever its mode, so as root the scenario runs as ``nobody``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memabra.storage import open_log

_NOBODY = 65534

_PROBE = """
import json, sys
from memabra.storage import EpisodeLog, open_log

def outcome(call):
    try:
        call()
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return ["ok", ""]

def unchecked_read():
    with EpisodeLog(check=False) as log:
        log.count_episodes()

print(json.dumps({
    "EpisodeLog": outcome(lambda: EpisodeLog().close()),
    "open_log": outcome(lambda: open_log().close()),
    "unchecked": outcome(unchecked_read),
}))
"""


def _run_in(folder: Path) -> dict[str, list[str]]:
    """What opening the default database in ``folder`` (made read-only) raises, per way of opening."""
    command = [sys.executable, "-c", _PROBE]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, with no setpriv to run the scenario as an unprivileged user")
        command = [setpriv, f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups", *command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMABRA_")}
    env["HOME"] = str(folder)
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture
def folder() -> Iterator[Path]:
    # not pytest's tmp_path: its parents are closed to other users, which the run as nobody needs
    made = Path(tempfile.mkdtemp(prefix="memabra-ro-"))
    made.chmod(0o755)
    yield made
    made.chmod(0o755)
    shutil.rmtree(made, ignore_errors=True)


def test_no_database_in_a_read_only_working_directory_names_the_path_and_what_to_do(folder: Path) -> None:
    folder.chmod(0o555)
    seen = _run_in(folder)
    path = folder / "memabra.db"
    for way in ("EpisodeLog", "open_log", "unchecked"):
        kind, message = seen[way]
        assert kind == "ConfigError", (way, kind, message)
        assert str(path) in message and f"the directory {folder} is not writable" in message
        assert "$MEMABRA_DATABASE_URL" in message and "writable volume" in message
        assert "sqlalche.me" not in message and "memabra db upgrade" not in message  # it could not create it either
    assert not path.exists()


def test_a_database_in_a_read_only_working_directory_is_named_by_its_path(folder: Path) -> None:
    open_log(f"sqlite:///{folder / 'memabra.db'}").close()
    (folder / "memabra.db").chmod(0o644)  # its -wal and -shm files cannot be made next to it
    folder.chmod(0o555)
    seen = _run_in(folder)
    for way in ("EpisodeLog", "open_log", "unchecked"):
        kind, message = seen[way]
        assert kind == "DatabaseNotWritableError", (way, kind, message)
        assert f"the database sqlite:///memabra.db ({folder / 'memabra.db'}) refused " in message
        assert "its -wal/-shm files or their directory" in message
