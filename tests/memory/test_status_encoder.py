"""``memabra status`` says which encoder this environment serves: the embedding-model setting, where
it came from and the key its vectors are stored under, without loading the model; a setting naming
no usable model is a failed check, not a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from memory.test_encoder_setting import _build_model, _name_of
from typer.testing import CliRunner

from memabra._cli import app
from memabra._cli._status import UNHEALTHY_EXIT
from memabra._config import EMBEDDING_MODEL_ENV
from memabra.router import default_encoder
from memabra.router._model_folder import BUNDLED_NAME
from memabra.storage import upgrade

pytest.importorskip("sentence_transformers")

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_model(tmp_path_factory.mktemp("models") / "bge-small")


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    for name in (EMBEDDING_MODEL_ENV, "MEMABRA_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    url = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(url)
    return url


def _status(url: str, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    out = runner.invoke(app, ["status", "--db", url, "--json", "-", *args])
    return out.exit_code, out.output, json.loads(out.stdout[out.stdout.index("{") :])


def test_unset_shows_the_bundled_key(url: str) -> None:
    code, output, document = _status(url)
    assert code == 0, output
    key = BUNDLED_NAME if default_encoder() is not None else None
    assert document["encoder"] == {"model": None, "source": None, "key": key, "error": None, "key_read": True}
    if key is not None:
        assert f"encoder   {key} (the bundled all-MiniLM-L6-v2" in output
        assert "no vector stored under it yet" in output


def test_the_variable_shows_its_value_source_and_key(
    url: str, monkeypatch: pytest.MonkeyPatch, model_folder: Path
) -> None:
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(model_folder))
    code, output, document = _status(url, "--exact")
    assert code == 0, output
    key = _name_of(model_folder)
    assert document["encoder"] == {
        "model": str(model_folder),
        "source": "$MEMABRA_EMBEDDING_MODEL",
        "key": key,
        "error": None,
        "key_read": True,
    }
    assert f"encoder {key} ({model_folder}, from $MEMABRA_EMBEDDING_MODEL;" in " ".join(output.split())


def test_the_file_setting_is_named_with_its_file(url: str, model_folder: Path) -> None:
    Path("memabra.toml").write_text(f'[embeddings]\nmodel = "{model_folder}"\n')
    code, output, document = _status(url, "--exact")
    assert code == 0, output
    assert document["encoder"]["source"] == "memabra.toml: [embeddings] model"
    assert document["encoder"]["key"] == _name_of(model_folder)


@pytest.mark.parametrize("given", ["/nowhere/bge-small", "[embeddings]\nmodle = 'x'\n"])
def test_a_bad_setting_fails_the_check_without_a_traceback(
    url: str, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    if given.startswith("["):
        Path("memabra.toml").write_text(given)
    else:
        monkeypatch.setenv(EMBEDDING_MODEL_ENV, given)
    out = runner.invoke(app, ["status", "--db", url, "--json", "-"])
    assert out.exit_code == UNHEALTHY_EXIT, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)
    document = json.loads(out.stdout[out.stdout.index("{") :])
    assert document["healthy"] is False and document["encoder"]["key"] is None
    (problem,) = [p for p in document["problems"] if p["check"] == "encoder"]
    assert problem["message"] == document["encoder"]["error"]
    expected = "names /nowhere/bge-small, which does not exist" if given.startswith("/") else "unknown key 'modle'"
    assert expected in problem["message"] and expected in " ".join(out.output.split())
    assert "✗ encoder:" in out.output


def test_status_names_the_encoder_without_loading_torch(url: str, model_folder: Path) -> None:
    # a fresh process: this one has torch loaded by the model built above
    code = (
        "import sys; from typer.testing import CliRunner; from memabra._cli import app\n"
        f"r = CliRunner().invoke(app, ['status', '--db', {url!r}, '--json', '-', '--exact'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'bge-small@' in r.stdout, r.stdout\n"
        "loaded = [m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": "/usr/bin:/bin", EMBEDDING_MODEL_ENV: str(model_folder), "HOME": str(Path.home())}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_a_probe_without_exact_checks_the_setting_but_never_hashes_the_model(
    url: str, monkeypatch: pytest.MonkeyPatch, model_folder: Path
) -> None:
    """A liveness probe runs status every few seconds in a fresh process: hashing a model folder of
    several hundred megabytes there cost seconds each time (measured: 1.9 s became 3.5 s at 400 MB)."""
    import memabra.router._model_folder as folders

    def no_hashing(*args: object, **kwargs: object) -> str:
        raise AssertionError("the model folder was hashed")

    monkeypatch.setattr(folders, "_folder_digest", no_hashing)
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(model_folder))
    code, output, document = _status(url)
    assert code == 0, output
    assert document["encoder"] == {
        "model": str(model_folder),
        "source": "$MEMABRA_EMBEDDING_MODEL",
        "key": None,
        "error": None,
        "key_read": False,
    }
    assert "its vector key with --exact" in " ".join(output.split())
