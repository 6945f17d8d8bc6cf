"""memabra in a container with a read-only root file system (Kubernetes' ``readOnlyRootFilesystem``):
only a few volumes are writable, $HOME may be unset or read-only, and the hub is out of reach.

Root ignores permission bits, so a read-only folder is simulated where the code asks about it
(``os.access``, as a read-only mount answers EROFS to access(2)) or with a $HOME that is a file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from memabra._cli import _database, app

runner = CliRunner(env={"COLUMNS": "200"})


def _read_only(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    real = os.access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        if Path(path).absolute() == folder.absolute() and mode & os.W_OK:
            return False
        return real(path, mode, **kwargs)

    monkeypatch.setattr(_database.os, "access", access)


def test_db_upgrade_into_a_read_only_folder_names_it_instead_of_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the init container's default database lands in the image's working directory
    _read_only(monkeypatch, tmp_path)
    target = tmp_path / "memabra.db"
    result = runner.invoke(app, ["db", "upgrade", "--db", f"sqlite:///{target}"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"the directory {tmp_path} is not writable" in message
    assert "writable volume" in message
    assert not target.exists()


def test_a_failed_migration_reports_its_own_error_when_its_file_cannot_be_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on a read-only file system unlink() answers EROFS even for a file that is not there
    def unlink(self: Path, missing_ok: bool = False) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    def upgrade(url: str, revision: str) -> str:
        raise OperationalError("connect", {}, Exception("unable to open database file"))

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(OperationalError, match="unable to open database file"):
        _database.migrate(upgrade, f"sqlite:///{tmp_path / 'new.db'}", "head")


@pytest.mark.parametrize("home", ["file", "missing-parent"])
def test_install_completion_without_a_writable_home_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: str
) -> None:
    # read when typer builds the command, so that the shell is given rather than detected
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    if home == "file":
        where = tmp_path / "home"
        where.write_text("")
    else:
        blocker = tmp_path / "blocker"
        blocker.write_text("")
        where = blocker / "home"
    result = CliRunner(env={"HOME": str(where), "COLUMNS": "200"}).invoke(app, ["--install-completion", "bash"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    message = " ".join(result.output.split())
    assert message.startswith("error: cannot install shell completion:")
    assert str(where) in message and "--show-completion" in message


class _FakeModel:
    def get_embedding_dimension(self) -> int:
        return 2

    def encode(self, texts: list[str], **_: Any) -> np.ndarray:
        return np.tile(np.array([1.0, 0.0], dtype=np.float32), (len(texts), 1))


def _recording_loader(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    from memabra.router import _similarity

    loads: list[dict[str, Any]] = []

    def load(path: str, device: str, **options: Any) -> object:
        loads.append({"path": path, **options})
        return _FakeModel()

    monkeypatch.setattr(_similarity, "_load_quietly", load)
    return loads


def test_the_setting_resolved_model_is_loaded_without_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sentence_transformers")
    from memabra.router import default_encoder

    folder = tmp_path / "encoder"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMABRA_CONFIG", raising=False)
    monkeypatch.setenv("MEMABRA_EMBEDDING_MODEL", str(folder))
    loads = _recording_loader(monkeypatch)
    encoder = default_encoder()
    assert encoder is not None
    encoder.encode(["hello"])
    assert loads == [{"path": str(folder), "local_files_only": True}]


def test_a_hub_id_given_in_python_may_still_be_downloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    from memabra.router import SentenceTransformerEncoder

    loads = _recording_loader(monkeypatch)
    SentenceTransformerEncoder("org/some-model").encode(["hello"])
    assert loads == [{"path": "org/some-model"}]
