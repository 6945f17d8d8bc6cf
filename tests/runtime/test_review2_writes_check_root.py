"""The writes check as root, reviewed again: a container running as root that writes its log into
a host folder mounted into it (``docker run -v ./data:/data``: the folder is owned by a host user
the container has no account for, the file it created is root's) writes its own file, and must not
be told that the folder's owner cannot; ``sudo memabra init`` in a service user's folder (an
account here) still fails the check."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from memabra._write_check import WriteState, write_problems, write_state
from memabra.storage import make_engine, upgrade

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the root heuristic runs only as root")

HOST_UID = 54_323  # a host user's id, with no account in the container


def _state(path: Path) -> WriteState:
    engine = make_engine(f"sqlite:///{path}")
    try:
        return write_state(engine)
    finally:
        engine.dispose()


@pytest.fixture
def mounted(tmp_path: Path) -> Path:
    assert not any(p.pw_uid == HOST_UID for p in pwd.getpwall())
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, HOST_UID, HOST_UID)
    data.chmod(0o755)
    upgrade(f"sqlite:///{data / 'memabra.db'}")  # created by root, as the container's agents run
    (data / "memabra.db").chmod(0o644)
    return data / "memabra.db"


def test_root_s_own_file_in_a_mounted_host_folder_passes(mounted: Path) -> None:
    state = _state(mounted)
    assert state.as_root and state.writer == "root"
    assert state.file_writable is True and state.folder_writable is True
    assert state.writable and write_problems(state) == ()


def test_root_s_own_file_made_read_only_there_still_fails(mounted: Path) -> None:
    mounted.chmod(0o444)
    state = _state(mounted)
    assert state.writer == "root" and state.file_writable is False


def test_a_root_file_in_a_service_account_s_folder_still_fails(mounted: Path) -> None:
    try:
        service = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' to stand for a service user")
    os.chown(mounted.parent, service.pw_uid, service.pw_gid)
    state = _state(mounted)
    assert state.writer == "nobody" and state.file_writable is False
