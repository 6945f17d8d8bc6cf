"""One setting names the embedding model a deployment serves (``MEMABRA_EMBEDDING_MODEL``, or
``[embeddings] model`` in the config file), so that the agent's router and recall, ``memabra bench``
and ``memabra memories search`` all score with that model, not one with the bundled MiniLM.

The models here are built in the test (a one-layer BERT over a few words): nothing is downloaded.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import typer
from tiny_sentence_model import build_tiny_model
from typer.testing import CliRunner

from memabra import ConfigError
from memabra._cli import app
from memabra._cli._bench import bench
from memabra._config import EMBEDDING_MODEL_ENV, load_embedding_model, load_reward_config
from memabra._environment import unknown_variables
from memabra.router import CachingEncoder, LinearRouter, SentenceTransformerEncoder, Similarity, default_encoder
from memabra.router._model_folder import BUNDLED_NAME
from memabra.storage import EmbeddingTable, EpisodeLog, upgrade

pytest.importorskip("sentence_transformers")

WORDS = "my dog is called rex i am vegetarian weather forecast divorce lawyer pizza recipe flight booking question about tool for a b c d 0 1 2 3"


def _build_model(folder: Path, seed: int = 0) -> Path:
    """A tiny sentence-transformers model saved to ``folder``."""
    return build_tiny_model(folder, WORDS.split(), seed=seed)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_model(tmp_path_factory.mktemp("models") / "bge-small")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # no memabra.toml or setting of the developer's leaks in
    monkeypatch.chdir(tmp_path)
    for name in (EMBEDDING_MODEL_ENV, "MEMABRA_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def _name_of(folder: Path) -> str:
    return SentenceTransformerEncoder(str(folder)).name


def test_nothing_set_keeps_the_bundled_minilm_and_its_key() -> None:
    assert load_embedding_model() is None
    encoder = default_encoder()
    if encoder is not None:  # the embeddings extra is installed
        assert encoder.name == BUNDLED_NAME == "sentence-transformers:all-MiniLM-L6-v2"
        assert default_encoder() is encoder


def test_the_variable_names_the_model_every_default_router_scores_with(
    monkeypatch: pytest.MonkeyPatch, model_folder: Path
) -> None:
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(model_folder))
    encoder = default_encoder()
    assert encoder is not None and encoder.name == _name_of(model_folder)
    assert encoder.name.startswith("sentence-transformers:bge-small@")
    assert default_encoder() is encoder  # one model and one cache per process
    assert Similarity.default().encoder is encoder
    router = LinearRouter()
    router._ensure_state()
    assert router._similarity.encoder is encoder
    # an explicit argument still wins over the setting
    own = CachingEncoder(SentenceTransformerEncoder(None))
    assert LinearRouter(similarity=Similarity(encoder=own)).similarity.encoder is own  # type: ignore[union-attr]


def test_the_config_file_names_it_and_the_variable_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_folder: Path
) -> None:
    other = _build_model(tmp_path / "other", seed=1)
    Path("memabra.toml").write_text(f'[embeddings]\nmodel = "{model_folder}"\n\n[reward]\ndefault_success = 0.4\n')
    setting = load_embedding_model()
    assert setting is not None and setting.model == str(model_folder) and "[embeddings] model" in setting.source
    assert default_encoder().name == _name_of(model_folder)  # type: ignore[union-attr]
    assert load_reward_config().default_success == 0.4  # the reward's reader accepts the new table
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(other))
    assert default_encoder().name == _name_of(other)  # type: ignore[union-attr]


@pytest.mark.parametrize("given", ["/nowhere/bge-small", "./bge-small", "org/not-downloaded-model"])
def test_a_setting_naming_no_model_is_refused_naming_it_and_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str
) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, given)
    with pytest.raises(ConfigError, match=rf"^\$MEMABRA_EMBEDDING_MODEL names {given}, which"):
        default_encoder()
    monkeypatch.delenv(EMBEDDING_MODEL_ENV)
    Path("memabra.toml").write_text(f'[embeddings]\nmodel = "{given}"\n')
    with pytest.raises(ConfigError, match=rf"memabra.toml: \[embeddings\] model names {given}, which"):
        default_encoder()


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[embeddings]\nmodle = "x"\n', r"unknown key 'modle' in \[embeddings\]; did you mean model\?"),
        ("[embeddings]\nmodel = 3\n", r"\[embeddings\] model must be"),
        ('[embedding]\nmodel = "x"\n', r"unknown table or key 'embedding' .*did you mean embeddings\?"),
    ],
)
def test_a_mistyped_file_setting_is_refused_by_every_reader(toml: str, message: str) -> None:
    Path("memabra.toml").write_text(toml)
    for read in (load_embedding_model, load_reward_config, default_encoder):
        with pytest.raises(ConfigError, match=message):
            read()


def test_the_variable_is_known_and_refused_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    assert unknown_variables({EMBEDDING_MODEL_ENV: "x"}) == ()
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, " ")
    with pytest.raises(ConfigError, match=r"\$MEMABRA_EMBEDDING_MODEL is set but empty"):
        default_encoder()


def test_a_hub_id_is_read_from_the_local_cache_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_folder: Path
) -> None:
    import huggingface_hub

    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny-encoder"
    shutil.copytree(model_folder, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, "org/tiny-encoder")
    encoder = default_encoder()
    # named by its model id (not the revision hash) and the digest of the cached files
    assert encoder is not None and encoder.name == _name_of(model_folder).replace("bge-small@", "org/tiny-encoder@")
    assert encoder.encode(["my dog"]).shape == (1, 8)


def _bench_cli(*args: str) -> tuple[int, str]:
    runner = typer.Typer()
    runner.command()(bench)
    result = CliRunner().invoke(runner, list(args))
    return result.exit_code, result.output


def _rounds(tmp_path: Path) -> Path:
    topics = ["weather forecast", "divorce lawyer", "pizza recipe", "flight booking"]
    rows = [
        {
            "id": f"r{i}",
            "query": f"question {i} about {topics[i % 4]}",
            "candidates": [
                {"id": f"t-{c}", "kind": "tool", "text": f"{c} tool for {topics[j]}", "tokens": 10 + j}
                for j, c in enumerate("abcd")
            ],
            "relevant": ["t-a"],
            "slots": 1,
            "group": "g",
        }
        for i in range(4)
    ]
    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bench_scores_with_the_setting_and_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_folder: Path
) -> None:
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(model_folder))
    name = _name_of(model_folder)
    label = "bm25+" + name.removeprefix("sentence-transformers:")
    out = tmp_path / "out.json"
    code, output = _bench_cli(str(_rounds(tmp_path)), "--routers", "hybrid", "--passes", "1", "--json", str(out))
    assert code == 0, output
    report = json.loads(out.read_text())
    assert report["similarity"] == label and report["environment"]["encoder"] == name
    assert "bge-small@" in output and "minilm" not in output
    code, output = _bench_cli(
        str(_rounds(tmp_path)), "--routers", "hybrid", "--passes", "1", "--seeds", "0-1", "--json", str(out)
    )
    assert code == 0, output
    summary = json.loads(out.read_text())
    assert summary["similarity"] == label and summary["environment"]["encoder"] == name
    assert {run["similarity"] for run in summary["runs"]} == {label}
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(tmp_path / "gone"))
    code, output = _bench_cli(str(_rounds(tmp_path)), "--routers", "hybrid", "--passes", "1")
    assert code == 1 and f"$MEMABRA_EMBEDDING_MODEL names {tmp_path / 'gone'}, which does not exist" in " ".join(
        output.split()
    )


def test_bench_without_a_setting_keeps_its_published_label(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    code, output = _bench_cli(str(_rounds(tmp_path)), "--routers", "bm25", "--passes", "1", "--json", str(out))
    assert code == 0, output
    report = json.loads(out.read_text())
    semantic = default_encoder() is not None
    assert report["similarity"] == ("bm25+minilm" if semantic else "bm25")
    assert report["environment"]["encoder"] == (BUNDLED_NAME if semantic else None)


def test_memories_search_recalls_with_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'memabra.db'}"
    upgrade(url)
    runner = CliRunner(env={"COLUMNS": "200"})
    for fact in ("my dog is called rex", "i am vegetarian"):
        assert runner.invoke(app, ["memories", "add", fact, "--user", "ann", "--db", url]).exit_code == 0
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(model_folder))
    with caplog.at_level(logging.INFO, logger="memabra"):
        result = runner.invoke(app, ["memories", "search", "dog called", "--user", "ann", "--db", url])
    assert result.exit_code == 0, result.output
    assert "my dog is called rex" in result.output
    with EpisodeLog(url) as log:
        models = EmbeddingTable(log.engine).models()
    assert _name_of(model_folder) in models and BUNDLED_NAME not in models
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(tmp_path / "gone"))
    result = runner.invoke(app, ["memories", "search", "dog", "--user", "ann", "--db", url])
    assert result.exit_code == 1 and "$MEMABRA_EMBEDDING_MODEL names" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
