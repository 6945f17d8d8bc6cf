"""The writes check, reviewed: as root it asks whether the user the agents run as may write (the
database file's owner, or its folder's where root owns the file), not whether each path's own
owner may; and a SQLite ``file:`` URI that opens the file read-only (``mode=ro``,
``immutable=1``) is a refusal, with its file checked like any other."""

from __future__ import annotations

import os
import pwd
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.pool import StaticPool

from memabra._write_check import WriteState, write_problems, write_state
from memabra.storage import make_engine, upgrade

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the root heuristic runs only as root")


def _state(url: str) -> WriteState:
    engine = make_engine(url)
    try:
        return write_state(engine)
    finally:
        engine.dispose()


@pytest.fixture
def service_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' to stand for a service user")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    upgrade(f"sqlite:///{logs / 'memabra.db'}")
    return logs


@as_root
def test_a_service_user_s_file_in_a_folder_only_root_may_write_fails(
    folder: Path, service_user: pwd.struct_passwd
) -> None:
    """systemd: the service user owns its file, but SQLite creates -wal/-shm in a root-owned 0755
    folder that user cannot write: every write is refused, though root (the folder's owner) could."""
    os.chown(folder / "memabra.db", service_user.pw_uid, service_user.pw_gid)
    folder.chmod(0o755)
    state = _state(f"sqlite:///{folder / 'memabra.db'}")
    assert state.writer == "nobody"
    assert state.file_writable is True and state.folder_writable is False
    (problem,) = write_problems(state)
    assert "nobody, the user the agents are taken to run as" in problem.message


@as_root
def test_a_root_owned_file_in_a_service_user_s_folder_fails(folder: Path, service_user: pwd.struct_passwd) -> None:
    """``sudo memabra init`` in the service's folder leaves a file root owns (0644): the service
    user, the folder's owner, cannot write it."""
    os.chown(folder, service_user.pw_uid, service_user.pw_gid)
    (folder / "memabra.db").chmod(0o644)
    state = _state(f"sqlite:///{folder / 'memabra.db'}")
    assert state.writer == "nobody"
    assert state.file_writable is False and state.folder_writable is True
    assert not state.writable


@as_root
def test_a_service_user_s_own_file_and_folder_pass(folder: Path, service_user: pwd.struct_passwd) -> None:
    for path in (folder, folder / "memabra.db"):
        os.chown(path, service_user.pw_uid, service_user.pw_gid)
    assert _state(f"sqlite:///{folder / 'memabra.db'}").writable


@as_root
def test_an_fsgroup_volume_passes_through_its_group_bits(folder: Path) -> None:
    """Kubernetes fsGroup: a numeric user (no passwd entry) owns the file; the folder is root's,
    group-writable by the volume's group, which the file carries too."""
    uid, gid = 54_321, 54_322
    assert not any(p.pw_uid == uid for p in pwd.getpwall())
    os.chown(folder, 0, gid)
    folder.chmod(0o2775)
    os.chown(folder / "memabra.db", uid, gid)
    (folder / "memabra.db").chmod(0o664)
    state = _state(f"sqlite:///{folder / 'memabra.db'}")
    assert state.writer == str(uid) and state.writable
    folder.chmod(0o2755)  # not group-writable: that user cannot create -wal/-shm
    assert not _state(f"sqlite:///{folder / 'memabra.db'}").writable


@pytest.mark.parametrize("option", ["mode=ro", "immutable=1"])
def test_a_file_uri_opening_it_read_only_fails_the_check(folder: Path, option: str) -> None:
    path = folder / "memabra.db"
    # what SQLite does with it: every write refused, though the file is writable
    with sqlite3.connect(f"file:{path}?{option}", uri=True) as raw, pytest.raises(sqlite3.OperationalError):
        raw.execute("CREATE TABLE t (x)")
    state = _state(f"sqlite:///file:{path}?{option}&uri=true")
    assert state.uri_read_only is True and not state.writable
    assert state.file == str(path)
    (problem,) = write_problems(state)
    assert "opens the file read-only" in problem.message


def test_a_writable_file_uri_has_its_file_checked(folder: Path) -> None:
    state = _state(f"sqlite:///file:{folder / 'memabra.db'}?mode=rwc&uri=true")
    assert state.writable and state.uri_read_only is False
    assert state.file == str(folder / "memabra.db") and state.folder_writable is True


def test_an_in_memory_file_uri_has_no_file() -> None:
    engine = create_engine("sqlite:///file:shared?mode=memory&cache=shared&uri=true", poolclass=StaticPool)
    state = write_state(engine)
    engine.dispose()
    assert state.file is None and state.writable
