"""BM25, the encoder seam and its cache, and the embeddings fallback."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from memabra import ConfigError
from memabra.router import (
    BM25,
    CachingEncoder,
    EmbeddingRouter,
    Similarity,
    _baselines,
    _similarity,
    embeddings_available,
)
from memabra.router._text import analyze

from .conftest import HashingEncoder


def test_tokeniser_splits_identifiers_and_drops_stop_words() -> None:
    assert analyze("lawyer.search getWeatherForecast the_best") == (
        "lawyer",
        "search",
        "get",
        "weather",
        "forecast",
        "best",
    )


def test_bm25_matches_the_formula() -> None:
    docs = ["apple banana", "apple apple cherry", "durian"]
    scores = BM25(k1=1.5, b=0.75).scores("apple", docs)
    n, df, avgdl = 3, 2, (2 + 3 + 1) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = [
        idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * length / avgdl)) if tf else 0.0
        for tf, length in [(1, 2), (2, 3), (0, 1)]
    ]
    np.testing.assert_allclose(scores, expected)
    assert not BM25().scores("", docs).any()


def test_bm25_scores_do_not_depend_on_the_string_hash_seed() -> None:
    # a score summed in a set's order changes in its last bit with PYTHONHASHSEED, and a tie between
    # two candidates with it: a seeded bench or OPE run would not repeat in another process
    program = (
        "from memabra.router import BM25; "
        "docs = ['rain forecast burr descale espresso espresso grinder', 'forecast shipping burr refund rain "
        "espresso', 'grinder espresso refund espresso forecast espresso burr weather', 'weather espresso "
        "grinder espresso', 'forecast rain burr rain invoice descale weather', 'refund shipping descale rain']; "
        "print([s.hex() for s in BM25().scores('espresso grinder burr descale weather forecast rain', docs)])"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in range(6)
    }
    assert len(outputs) == 1


def test_caching_encoder_embeds_each_text_once() -> None:
    inner = HashingEncoder()
    cached = CachingEncoder(inner, max_entries=10)
    first = cached.encode(["a pool text", "another one", "a pool text"])
    second = cached.encode(["another one", "a pool text"])
    assert inner.calls == [2]
    np.testing.assert_array_equal(first[1], second[0])


def test_similarity_without_encoder_is_lexical_only() -> None:
    sim = Similarity()
    assert not sim.has_semantic
    assert not sim.semantic("query", ["a", "b"]).any()
    semantic = Similarity(encoder=HashingEncoder()).semantic("divorce lawyer", ["divorce lawyer", "weather"])
    assert semantic[0] == pytest.approx(1.0, abs=1e-6) and semantic[1] < 0.5


def test_embedding_baseline_names_the_extra_when_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_baselines, "embeddings_available", lambda: False)
    with pytest.raises(ConfigError, match="embeddings"):
        EmbeddingRouter().featurize  # noqa: B018 - attribute access is harmless
        EmbeddingRouter()._ensure_state()
    with pytest.raises(ConfigError, match="encoder"):
        EmbeddingRouter(similarity=Similarity())._ensure_state()
    monkeypatch.setattr(_similarity, "embeddings_available", lambda: False)
    assert _similarity.default_encoder() is None
    assert not Similarity.default().has_semantic


@pytest.mark.skipif(not embeddings_available(), reason="the embeddings extra is not installed")
def test_bundled_minilm_encoder_ranks_paraphrases() -> None:
    sim = Similarity.default()
    scores = sim.semantic("where do I live?", ["I live in Seattle with my dog.", "My espresso machine broke."])
    assert scores[0] > scores[1]
