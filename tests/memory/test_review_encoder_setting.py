"""Review of the embedding-model setting: a folder that holds no model is refused at the setting,
naming it, before its files are hashed for a key or the model fails to load on a background thread."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from memory.test_encoder_setting import _build_model

from memabra import ConfigError
from memabra._config import EMBEDDING_MODEL_ENV
from memabra.router import default_encoder

pytest.importorskip("sentence_transformers")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in (EMBEDDING_MODEL_ENV, "MEMABRA_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def test_the_folder_above_the_model_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    _build_model(models / "bge-small")
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(models))
    with pytest.raises(ConfigError, match=rf"^\$MEMABRA_EMBEDDING_MODEL names {models}, whose folder .* holds no"):
        default_encoder()
    Path("memabra.toml").write_text(f'[embeddings]\nmodel = "{models}"\n')
    monkeypatch.delenv(EMBEDDING_MODEL_ENV)
    with pytest.raises(ConfigError, match=r"^memabra.toml: \[embeddings\] model names .* holds no"):
        default_encoder()


def test_a_half_downloaded_hub_snapshot_is_refused_naming_the_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    cache = tmp_path / "hub"
    repo = cache / "models--org--partial"
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    (repo / "snapshots" / "0123abcd" / "README.md").write_text("a model card, fetched alone")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, "org/partial")
    with pytest.raises(ConfigError, match=r"names org/partial, whose folder .* holds no .*download the model again"):
        default_encoder()


def test_a_model_folder_still_resolves(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = _build_model(tmp_path / "plain")
    (folder / "modules.json").unlink()  # a plain transformers model: sentence-transformers pools it by mean
    shutil.rmtree(folder / "1_Pooling", ignore_errors=True)
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(folder))
    encoder = default_encoder()
    assert encoder is not None and encoder.name.startswith("sentence-transformers:plain@")
