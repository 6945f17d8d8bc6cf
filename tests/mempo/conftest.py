"""Tiny causal LMs and a word-level tokenizer, built and saved offline for the MemPO scorer tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memabra.evals.mempo import RoutingDecisionItem, Trajectory, memory_probes, routing_contexts

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
TAGS = (
    "<mem>",
    "</mem>",
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<tool_response>",
    "</tool_response>",
    "<answer>",
    "</answer>",
)
WORDS = tuple(
    """
    what is the capital of france japan italy spain paris tokyo rome madrid unknown
    weather nice today bob likes green tea alice plays chess every sunday river flows north
    search find look up result document says city country answer think keep so far i need to
    my notes the a an who wrote hamlet shakespeare when was it written 1600 how tall everest
    meters 8848 and ; . , ? !
    """.split()
)

FACTS = {
    "france": "the capital of france is paris",
    "japan": "the capital of japan is tokyo",
    "italy": "the capital of italy is rome",
    "spain": "the capital of spain is madrid",
}
CITIES = {"france": "paris", "japan": "tokyo", "italy": "rome", "spain": "madrid"}
DISTRACTORS = (
    "bob likes green tea",
    "alice plays chess every sunday",
    "the river flows north",
    "the weather is nice today",
)


def _mempo_extra() -> tuple[Any, Any]:
    torch = pytest.importorskip("torch", reason="the MemPO scorer tests need the mempo extra (torch)")
    transformers = pytest.importorskip(
        "transformers", reason="the MemPO scorer tests need the mempo extra (transformers)"
    )
    return torch, transformers


def build_tokenizer(directory: Path) -> None:
    _, transformers = _mempo_extra()
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {token: index for index, token in enumerate(dict.fromkeys([*SPECIAL_TOKENS, *TAGS, *WORDS]))}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens([AddedToken(token, normalized=False) for token in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(tag, normalized=False) for tag in TAGS])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])]
    )
    wrapped = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]"
    )
    wrapped.save_pretrained(directory)


def tiny_model(architecture: str, vocab_size: int) -> Any:
    _, transformers = _mempo_extra()
    if architecture == "llama":
        config = transformers.LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=3,
        )
        return transformers.LlamaForCausalLM(config)
    config = transformers.GPT2Config(
        vocab_size=vocab_size,
        n_positions=256,
        n_embd=32,
        n_layer=2,
        n_head=4,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    return transformers.GPT2LMHeadModel(config)


def save_random_model(directory: Path, architecture: str, seed: int) -> Path:
    torch, transformers = _mempo_extra()
    build_tokenizer(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = tiny_model(architecture, len(tokenizer))
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from threads, and on a busy CI runner spinning BLAS threads turn
    seconds into minutes; the setting is restored afterwards."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session", params=["llama", "gpt2"])
def random_model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised tiny model of each architecture (RoPE and learned positions)."""
    return save_random_model(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param, seed=0)


def capital_items() -> Iterator[tuple[str, RoutingDecisionItem]]:
    """For each country, a decision whose memories hold the capital fact among distractors."""
    for index, (country, fact) in enumerate(FACTS.items()):
        distractors = [DISTRACTORS[(index + k) % len(DISTRACTORS)] for k in range(2)]
        yield (
            country,
            RoutingDecisionItem(
                id=country,
                question=f"what is the capital of {country} ?",
                selected=tuple(distractors),
                candidates=(distractors[0], fact, distractors[1]),
                gold_answer=CITIES[country],
            ),
        )


def capital_trajectories() -> Iterator[tuple[str, Trajectory]]:
    """For each country, a trajectory that finds the capital fact and then writes a memory that
    drops it: the full history holds the answer, the memory does not."""
    for index, (country, fact) in enumerate(FACTS.items()):
        distractor = DISTRACTORS[index % len(DISTRACTORS)]
        yield (
            country,
            Trajectory(
                question=f"what is the capital of {country} ?",
                turns=(
                    f"<mem>nothing so far</mem><think>i need to search</think><search>capital of {country}</search>"
                    f"<tool_response>the document says {fact}</tool_response>",
                    f"<mem>{distractor}</mem><think>i need to answer</think><answer>{CITIES[country]}</answer>",
                ),
                gold_answer=CITIES[country],
            ),
        )


def training_examples() -> list[tuple[str, str]]:
    """(context, answer) pairs: the city where the context states the capital fact, else "unknown"."""
    contexts: list[tuple[str, str]] = []
    for country, item in capital_items():
        fact = FACTS[country]
        a, b = item.selected
        memory_sets = [(fact,), (fact, a), (a, fact), (fact, b), (b, fact), (a, fact, b), (fact, a, b), (a, b, fact)]
        memory_sets += [(), (a,), (b,), (a, b), (b, a)]
        for memories in memory_sets:
            probe = RoutingDecisionItem(
                id="train", question=item.question, selected=memories, candidates=(), gold_answer="x"
            )
            contexts.append((country, routing_contexts(probe)[0]))
    for country, trajectory in capital_trajectories():
        for probe in memory_probes([trajectory]):
            contexts += [(country, probe.mem_context), (country, probe.full_context)]
    return [(context, CITIES[country] if FACTS[country] in context else "unknown") for country, context in contexts]


@pytest.fixture(scope="session")
def trained_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama taught, in a few hundred CPU steps, to answer a capital question with the city
    when its context states the capital and with "unknown" when it doesn't."""
    torch, transformers = _mempo_extra()
    directory = save_random_model(tmp_path_factory.mktemp("tiny-trained"), "llama", seed=1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32)
    rows = []
    for context, answer in training_examples():
        context_ids = tokenizer(context)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        rows.append((context_ids + answer_ids, len(context_ids)))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for row, (ids, answer_start) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, answer_start : len(ids)] = torch.tensor(ids[answer_start:])
    with torch.random.fork_rng():
        torch.manual_seed(1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model.train()
        for _ in range(TRAINING_STEPS):
            optimizer.zero_grad()
            model(input_ids=input_ids, attention_mask=attention, labels=labels).loss.backward()
            optimizer.step()
    model.eval()
    model.save_pretrained(directory)
    return directory


TRAINING_STEPS = 100
