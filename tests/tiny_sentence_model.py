"""A sentence-transformers model built in the test, never downloaded: a one-layer BERT over the
words it is given, saved as a full sentence-transformers folder (pooling included)."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterable
from pathlib import Path

import pytest


def build_tiny_model(folder: Path, words: Iterable[str], *, width: int = 8, seed: int = 0) -> Path:
    """Save the model to ``folder`` (replacing what is there) and return it: its vocabulary is
    ``words``; ``width`` is its vector size; ``seed`` its weights (another seed: other weights of
    the same shape, as a fine-tuned model saved over the old one)."""
    pytest.importorskip("sentence_transformers")
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as token_models
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *sorted(set(words))]
    tokenizer = Tokenizer(token_models.WordLevel({w: i for i, w in enumerate(vocabulary)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()  # type: ignore[assignment]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocabulary),
        hidden_size=width,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=width,
        max_position_embeddings=32,
    )
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with warnings.catch_warnings():  # the scaffolding's own chatter, not memabra's
        warnings.simplefilter("ignore")
        BertModel(config).save_pretrained(folder)
        fast.save_pretrained(folder)
        SentenceTransformer(str(folder), device="cpu").save(str(folder))  # adds pooling: a full ST folder
    return folder
