"""The standalone learner (`memabra learner`) records in its snapshots the encoder the deployment
serves with (the setting the serving processes read, else the bundled MiniLM), not none: it learns
the cosines those processes logged. Serving its lineage under another encoder is then warned of,
and a lineage that goes on after a model change records the new one."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from runtime.learning_log import log_final
from typer.testing import CliRunner

from memabra import PolicySnapshot
from memabra._cli._app import app
from memabra._config import EMBEDDING_MODEL_ENV
from memabra._learner import DEFAULT_POLICY, Learner
from memabra._replay import fresh_router
from memabra.router import CachingEncoder, Similarity, load_router
from memabra.router._model_folder import BUNDLED_NAME
from memabra.router._persistence import learns_features_of
from memabra.router._snapshot_codec import decode_envelope
from memabra.storage import EpisodeLog, LearnerStore

pytest.importorskip("sentence_transformers")

runner = CliRunner(env={"COLUMNS": "200"})


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def encode(self, texts: list[str]) -> object:
        raise AssertionError("serving a snapshot embeds nothing")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no memabra.toml of the developer's
    for name in (EMBEDDING_MODEL_ENV, "MEMABRA_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def _model_folder(tmp_path: Path, name: str, content: str) -> Path:
    """A folder the setting can name (its key hashes its files; nothing here loads it)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(content)
    return folder


def _active(url: str) -> PolicySnapshot:
    with EpisodeLog(url) as log:
        version = LearnerStore(log.engine).active_version(DEFAULT_POLICY)
        assert version is not None
        return log.get_snapshot(version)


def _recorded(snapshot: PolicySnapshot) -> object:
    header, _ = decode_envelope(snapshot.model, snapshot.policy)
    return header.get("encoder", "<absent>")


def _learn(url: str) -> None:
    learned = runner.invoke(app, ["learner", "--once", "--db", url])
    assert learned.exit_code == 0, learned.output


def test_a_fresh_standalone_learner_records_the_bundled_encoder(
    migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 8)
    _learn(migrated_url)
    snapshot = _active(migrated_url)
    assert _recorded(snapshot) == BUNDLED_NAME
    # served under another encoder, the lineage is warned of (once per process and pair: a name of its own)
    other = f"other-model-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.WARNING, logger="memabra"):
        load_router(snapshot, similarity=Similarity(encoder=CachingEncoder(_Named(other))))
    assert any(BUNDLED_NAME in r.getMessage() and f"'{other}'" in r.getMessage() for r in caplog.records)


def test_the_learner_records_the_setting_and_follows_a_model_change(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _model_folder(tmp_path, "bge-small", '{"a": 1}')
    second = _model_folder(tmp_path, "bge-base", '{"b": 2}')
    with EpisodeLog(migrated_url) as log:  # the serving processes' episodes (logged here with the bundled model)
        log_final(log, 6)
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(first))
    _learn(migrated_url)
    recorded = _recorded(_active(migrated_url))
    assert isinstance(recorded, str) and recorded.startswith("sentence-transformers:bge-small@")
    # the deployment moves to another model: what the lineage learns from now on is its cosines
    monkeypatch.delenv(EMBEDDING_MODEL_ENV)
    with EpisodeLog(migrated_url) as log:
        log_final(log, 4, start=6)
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(second))
    _learn(migrated_url)
    moved = _recorded(_active(migrated_url))
    assert isinstance(moved, str) and moved.startswith("sentence-transformers:bge-base@")


def test_a_setting_naming_no_model_is_warned_of_and_the_learner_still_learns(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 5)
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(tmp_path / "missing"))
    learned = runner.invoke(app, ["learner", "--once", "--db", migrated_url])
    assert learned.exit_code == 0, learned.output
    assert "learned 5 rewards" in learned.output
    warned = [r.getMessage() for r in caplog.records if "the learner's snapshots record no encoder" in r.getMessage()]
    assert len(warned) == 1 and "does not exist" in warned[0]
    assert _recorded(_active(migrated_url)) == "<absent>"


def test_the_learner_records_the_encoder_it_is_given_over_its_starts(migrated_url: str) -> None:
    with EpisodeLog(migrated_url) as log:
        log_final(log, 5)
        learner = Learner(log, lambda: fresh_router(DEFAULT_POLICY), commit_every=2, encoder="model-x-4")
        learner.step()
        learner.close()
        committed = log.get_snapshot(LearnerStore(log.engine).checkpoint(DEFAULT_POLICY).snapshot_version)
        assert _recorded(committed) == "model-x-4"
        # without one, it passes on what its start recorded (the in-process learner scores with its own)
        log_final(log, 3, start=5)
        again = Learner(log, lambda: fresh_router(DEFAULT_POLICY), commit_every=1)
        again.step()
        again.close()
        latest = log.get_snapshot(LearnerStore(log.engine).checkpoint(DEFAULT_POLICY).snapshot_version)
        assert latest.version != committed.version
        assert _recorded(latest) == "model-x-4"


def test_an_empty_encoder_key_is_refused() -> None:
    with pytest.raises(Exception, match="non-empty string"):
        learns_features_of(fresh_router(DEFAULT_POLICY), "")
