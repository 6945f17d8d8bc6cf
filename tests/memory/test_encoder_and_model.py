"""The encoder is found without importing torch and loads once, quietly; with
``extract_with_model=True`` the chat model extracts facts and decides supersession."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from memabra import LLMFactExtractor, SQLMemory
from memabra.router import embeddings_available
from memabra.storage import EpisodeLog


def test_checking_for_embeddings_does_not_import_torch() -> None:
    code = "import sys; from memabra.router import embeddings_available; embeddings_available(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_the_encoder_loads_once_per_process_without_progress_bars() -> None:
    if not embeddings_available():
        pytest.skip("needs the embeddings extra")
    code = (
        "from memabra.router import default_encoder\n"
        "a = default_encoder(); b = default_encoder(); assert a is b\n"
        "a.preload(); a.encode(['hello']); b.encode(['world'])\n"
        "print(a.encoder._model is b.encoder._model)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    assert "Loading weights" not in out.stderr and "it/s" not in out.stderr, out.stderr


def _model(*replies: object) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(AIMessage(json.dumps(r)) for r in replies))


def test_the_model_extracts_the_fact_from_a_correction() -> None:
    extractor = LLMFactExtractor(_model(["I already told you: I'm vegetarian"]))
    assert extractor("I already told you I'm vegetarian!!") == ["I'm vegetarian"]


def test_the_model_decides_supersession(log: EpisodeLog) -> None:
    memory = SQLMemory(log)
    lyon = memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "I like jazz")
    # "I now spend my days in Hobart" has no subject the rules know; the model says it replaces Lyon.
    memory.supersession = LLMFactExtractor(_model([lyon.id]))
    memory.remember("ann", "I now spend my days in Hobart")
    assert sorted(i.text for i in memory.items("ann")) == ["I like jazz", "I now spend my days in Hobart"]


def test_a_model_reply_that_is_not_ids_falls_back_to_the_rules(log: EpisodeLog) -> None:
    memory = SQLMemory(log, supersession=LLMFactExtractor(_model("not a list", "nope")))
    memory.remember("ann", "I live in Lyon")
    memory.remember("ann", "I moved to Hobart")
    assert [i.text for i in memory.items("ann")] == ["I moved to Hobart"]
