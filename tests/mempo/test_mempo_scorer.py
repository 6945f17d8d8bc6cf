"""The transformers-backed scorer on tiny models built and saved by the test (no download)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from memabra._errors import ConfigError
from memabra.evals.mempo import (
    ScoringProgress,
    Trajectory,
    find_mem_spans,
    format_context,
    memory_block,
)

from .conftest import CITIES, capital_items, capital_trajectories

torch = pytest.importorskip("torch", reason="the MemPO scorer needs the mempo extra (torch)")
pytest.importorskip("transformers", reason="the MemPO scorer needs the mempo extra (transformers)")

from memabra.evals.mempo import MemPOScorer, ScorerOutOfMemoryError  # noqa: E402

CONTEXTS = [
    format_context("what is the capital of france ?", memory_block(["the capital of france is paris"])),
    format_context("who wrote hamlet ?", memory_block([])),
    format_context(
        "how tall is everest ?", memory_block(["bob likes green tea", "the river flows north", "i need to search"])
    ),
    "what",
    format_context("when was it written ?", "<mem>shakespeare wrote hamlet</mem>\n<think>keep it</think>"),
]
ANSWERS = ["paris", "shakespeare", "8848 meters", "is the capital of japan tokyo", "1600"]


def reference_probabilities(model_dir: Path) -> np.ndarray:
    """One unpadded sequence at a time, straight through the model: the definition of P."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32).eval()
    out = []
    for context, answer in zip(CONTEXTS, ANSWERS, strict=True):
        context_ids = tokenizer(context)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([context_ids + answer_ids])
        with torch.inference_mode():
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        start = len(context_ids)
        token_log_p = [log_probs[start + k - 1, token].item() for k, token in enumerate(answer_ids)]
        out.append(np.exp(np.mean(token_log_p)))
    return np.asarray(out)


def test_probabilities_match_the_definition_one_sequence_at_a_time(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu", batch_size=1)
    scored = scorer.answer_probabilities(CONTEXTS, ANSWERS)
    np.testing.assert_allclose(scored.probabilities, reference_probabilities(random_model_dir), rtol=0, atol=1e-6)
    assert scored.answer_tokens.tolist() == [1, 1, 2, 6, 1]


@pytest.mark.parametrize("batch_size", [2, 3, 16])
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_batched_probabilities_equal_unbatched_on_either_padding_side(
    random_model_dir: Path, batch_size: int, padding_side: str
) -> None:
    unbatched = MemPOScorer(random_model_dir, device="cpu", batch_size=1).answer_probabilities(CONTEXTS, ANSWERS)
    batched = MemPOScorer(random_model_dir, device="cpu", batch_size=batch_size, padding_side=padding_side)  # type: ignore[arg-type]
    scored = batched.answer_probabilities(CONTEXTS, ANSWERS)
    np.testing.assert_allclose(scored.probabilities, unbatched.probabilities, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(scored.sequence_tokens, unbatched.sequence_tokens)


def test_a_result_does_not_depend_on_its_batch_neighbours(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu", batch_size=8)
    alone = scorer.answer_probabilities(CONTEXTS[:1], ANSWERS[:1]).probabilities[0]
    long_neighbour = [CONTEXTS[0], CONTEXTS[2] + " bob likes green tea" * 20]
    among = scorer.answer_probabilities(long_neighbour, [ANSWERS[0], ANSWERS[2]]).probabilities[0]
    assert among == pytest.approx(alone, abs=1e-5)


def test_probabilities_come_back_in_input_order(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu", batch_size=2)
    forward = scorer.answer_probabilities(CONTEXTS, ANSWERS).probabilities
    backward = scorer.answer_probabilities(CONTEXTS[::-1], ANSWERS[::-1]).probabilities
    np.testing.assert_allclose(backward[::-1], forward, atol=1e-5)


def test_an_overlong_context_loses_its_oldest_tokens(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu", batch_size=2)
    tail = " bob likes green tea" * 40
    scored = scorer.answer_probabilities(["the river flows north" * 60 + tail, "what" + tail], ["paris", "paris"])
    assert scored.sequence_tokens.tolist() == [256, 1 + 1 + 160 + 1]
    assert np.all((scored.probabilities > 0) & (scored.probabilities < 1))


def test_bad_answers_and_mismatched_lengths_are_rejected(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu")
    with pytest.raises(ValueError, match=r"answers\[1\]"):
        scorer.answer_probabilities(["a", "b"], ["paris", ""])
    with pytest.raises(ValueError, match="differ in length"):
        scorer.answer_probabilities(["a"], ["paris", "rome"])
    assert len(scorer.answer_probabilities([], [])) == 0


def test_cpu_defaults_to_float32(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert scorer.device.type == expected
    assert scorer.dtype == (torch.bfloat16 if expected == "cuda" else torch.float32)
    assert MemPOScorer(random_model_dir, device="cpu", dtype="bf16").dtype == torch.bfloat16


def test_the_model_must_be_a_local_directory_holding_a_model(tmp_path: Path, random_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="not a local directory"):
        MemPOScorer(tmp_path / "absent")
    with pytest.raises(ConfigError, match="config.json is missing"):
        MemPOScorer(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match="holds no weights"):
        MemPOScorer(tmp_path)
    with pytest.raises(ConfigError, match="never fetched from a hub"):
        MemPOScorer("gpt2-hub-name-that-is-not-a-dir/hub")


@pytest.mark.parametrize(
    ("field", "value"), [("batch_size", 0), ("padding_side", "middle"), ("dtype", "int8"), ("device", "tpu:x")]
)
def test_bad_settings_name_their_field(random_model_dir: Path, field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        MemPOScorer(random_model_dir, **{field: value})  # type: ignore[arg-type]


def test_mem_spans_are_found_in_the_scorers_tokens(random_model_dir: Path) -> None:
    tokenizer = MemPOScorer(random_model_dir, device="cpu").tokenizer
    ids = tokenizer("<mem>bob likes tea</mem><think>t</think><mem>paris</mem>", add_special_tokens=False)["input_ids"]
    opening = tokenizer("<mem>", add_special_tokens=False)["input_ids"]
    closing = tokenizer("</mem>", add_special_tokens=False)["input_ids"]
    assert find_mem_spans(ids, opening, closing) == [(0, 5), (8, 11)]


def test_the_context_holding_the_answer_scores_higher(trained_model_dir: Path) -> None:
    scorer = MemPOScorer(trained_model_dir, device="cpu", batch_size=3)
    items = [item for _, item in capital_items()]
    progress: list[ScoringProgress] = []
    chunks = list(scorer.score_routing_decisions(items, chunk_size=3, on_progress=progress.append))
    scores = [score for chunk in chunks for score in chunk]
    assert [len(chunk) for chunk in chunks] == [3, 1]
    assert [score.id for score in scores] == [item.id for item in items]
    for score in scores:
        assert score.p_all > 0.5 > score.p_selected, score
        assert score.reward == -1
        assert score.difference == pytest.approx(score.p_selected - score.p_all)
    assert progress[-1].items_done == len(items) and progress[-1].items_total == len(items)
    assert progress[-1].tokens_done == sum(score.tokens for score in scores) > 0


def test_a_selection_holding_the_answer_earns_plus_one(trained_model_dir: Path) -> None:
    scorer = MemPOScorer(trained_model_dir, device="cpu")
    swapped = [
        dataclasses.replace(item, selected=item.candidates, candidates=item.selected) for _, item in capital_items()
    ]
    scores = [score for chunk in scorer.score_routing_decisions(swapped) for score in chunk]
    assert all(score.p_selected > score.p_all and score.reward == 1 for score in scores)


def test_a_memory_that_drops_the_answer_scores_below_the_full_history(trained_model_dir: Path) -> None:
    scorer = MemPOScorer(trained_model_dir, device="cpu", batch_size=4)
    trajectories = [trajectory for _, trajectory in capital_trajectories()]
    blocks = scorer.score_memory_blocks(trajectories)
    assert [(block.trajectory, block.turn) for block in blocks] == [(t, turn) for t in range(4) for turn in (0, 1)]
    for block in blocks:
        if block.turn == 1:
            assert block.p_full > 0.5 > block.p_mem and block.reward == -1
    assert all(block.answer_tokens == 1 for block in blocks)


def test_memory_scores_do_not_depend_on_the_batch(trained_model_dir: Path) -> None:
    trajectories: list[Trajectory] = [trajectory for _, trajectory in capital_trajectories()]
    one = MemPOScorer(trained_model_dir, device="cpu", batch_size=1).score_memory_blocks(trajectories)
    many = MemPOScorer(trained_model_dir, device="cpu", batch_size=16, padding_side="right").score_memory_blocks(
        trajectories
    )
    np.testing.assert_allclose([b.p_mem for b in one], [b.p_mem for b in many], atol=1e-5)
    np.testing.assert_allclose([b.p_full for b in one], [b.p_full for b in many], atol=1e-5)
    assert set(CITIES.values()) == {t.gold_answer for t in trajectories}


def test_identical_pairs_get_identical_probabilities_whatever_their_batch(random_model_dir: Path) -> None:
    """bf16 with left padding (the CUDA default) gives a row a slightly different result when its
    batch is padded wider; a decision that selected every candidate has two identical contexts, and
    a difference of -4e-6 between them would grade it -1. Identical pairs are scored once."""
    short = format_context("what is the capital of france ?", memory_block(["bob likes green tea"]))
    long = format_context("what ?", memory_block(["bob likes green tea alice plays chess every sunday"] * 3))
    scorer = MemPOScorer(random_model_dir, device="cpu", batch_size=2, dtype="bf16")
    scored = scorer.answer_probabilities([short, long, short], ["paris", "paris", "paris"])
    assert scored.probabilities[0] == scored.probabilities[2]
    assert scored.sequence_tokens[0] == scored.sequence_tokens[2] < scored.sequence_tokens[1]
    everything = ("bob likes green tea", "the capital of france is paris")
    items = [
        dataclasses.replace(item, selected=everything, candidates=everything)
        if index == 1
        else dataclasses.replace(item, candidates=(*item.candidates, long))
        for index, (_, item) in enumerate(capital_items())
    ]
    for batch_size in (1, 2, 3):
        bf16 = MemPOScorer(random_model_dir, device="cpu", batch_size=batch_size, dtype="bf16")
        score = [s for chunk in bf16.score_routing_decisions(items) for s in chunk][1]
        assert score.difference == 0.0 and score.reward == 1


def test_unreadable_weights_are_a_config_error(tmp_path: Path, random_model_dir: Path) -> None:
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((random_model_dir / name).read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="the model does not load"):
        MemPOScorer(tmp_path, device="cpu")
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle either")
    with pytest.raises(ConfigError, match="the model does not load"):
        MemPOScorer(tmp_path, device="cpu")


def test_an_overlong_context_keeps_its_beginning_and_its_end(
    random_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The question opens a context and the answer tag closes it: a context too long for the model
    loses tokens from its middle (as LongBench truncates), never its question, and says so."""
    scorer = MemPOScorer(random_model_dir, device="cpu", batch_size=2)
    question = "what is the capital of france ?"
    words = ("bob likes green tea alice plays chess every sunday the river flows north " * 30).split()
    overlong = f"{question} {' '.join(words)} <answer>"
    room = 256 - 1  # the model's positions less the one answer token
    head = room // 2 - 1 - 7  # less the BOS token and the question's seven
    tail = room - room // 2 - 1  # less the answer tag
    kept = f"{question} {' '.join(words[:head])} {' '.join(words[-tail:])} <answer>"
    with caplog.at_level("WARNING", logger="memabra"):
        scored = scorer.answer_probabilities([overlong, kept], ["paris", "paris"])
    assert scored.sequence_tokens.tolist() == [256, 256]
    assert scored.probabilities[0] == pytest.approx(scored.probabilities[1], abs=1e-6)
    assert "1 of 2 contexts" in caplog.text and "middle" in caplog.text


def test_running_out_of_memory_names_the_batch_size(random_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu", batch_size=4)

    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(scorer.model, "forward", out_of_memory)
    with pytest.raises(
        ScorerOutOfMemoryError, match=r"out of memory on cpu scoring 2 sequences .* lower batch_size \(now 4\)"
    ):
        scorer.answer_probabilities(CONTEXTS[:2], ANSWERS[:2])


def test_a_gold_answer_longer_than_the_model_names_its_decision(random_model_dir: Path) -> None:
    from memabra._errors import InvalidRecordError

    items = [item for _, item in capital_items()]
    items[2] = dataclasses.replace(items[2], gold_answer="paris " * 300)
    scorer = MemPOScorer(random_model_dir, device="cpu")
    with pytest.raises(InvalidRecordError, match=rf"decision {items[2].id!r}: .*300 tokens, more than the model's 256"):
        list(scorer.score_routing_decisions(items))
    # the index a direct call names is its caller's, duplicates or not
    with pytest.raises(ValueError, match=r"answers\[2\] has 300 tokens"):
        scorer.answer_probabilities(["what", "what", "what"], ["paris", "paris", "paris " * 300])


def test_with_on_unscorable_the_rest_of_the_chunk_is_scored(random_model_dir: Path) -> None:
    items = [item for _, item in capital_items()]
    items[0] = dataclasses.replace(items[0], gold_answer="paris " * 300)
    items[2] = dataclasses.replace(items[2], gold_answer="paris " * 300)
    scorer = MemPOScorer(random_model_dir, device="cpu")
    left_out: list[tuple[str, str]] = []
    chunks = list(
        scorer.score_routing_decisions(
            items, chunk_size=3, on_unscorable=lambda item, why: left_out.append((item.id, why))
        )
    )
    assert [[score.id for score in chunk] for chunk in chunks] == [[items[1].id], [items[3].id]]
    assert [item_id for item_id, _ in left_out] == [items[0].id, items[2].id]
    assert all("more than the model's 256 positions" in why for _, why in left_out)
    alone = next(iter(scorer.score_routing_decisions([items[1]])))[0]
    assert chunks[0][0] == alone  # left out, the others' results are what they are alone


@pytest.mark.parametrize(
    ("version", "keyword"),
    [("4.44.2", "torch_dtype"), ("4.55.4", "torch_dtype"), ("4.56.0", "dtype"), ("5.25.0", "dtype")],
)
def test_the_dtype_keyword_follows_the_transformers_version(version: str, keyword: str) -> None:
    """transformers before 4.56 takes ``torch_dtype`` (and would load float32 silently otherwise)."""
    from memabra.evals.mempo._scorer import _dtype_keyword

    assert _dtype_keyword(version) == keyword


def test_the_loaded_model_has_the_dtype_asked_for(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu", dtype="bf16")
    assert next(scorer.model.parameters()).dtype == torch.bfloat16


def test_a_pair_that_is_not_two_strings_names_its_index(random_model_dir: Path) -> None:
    scorer = MemPOScorer(random_model_dir, device="cpu")
    with pytest.raises(TypeError, match=r"contexts\[1\] and answers\[1\] must be strings"):
        scorer.answer_probabilities(["what", ["not", "a", "string"]], ["paris", "paris"])  # type: ignore[list-item]


def test_a_cuda_device_that_does_not_exist_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from memabra.evals.mempo._scorer import _resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert _resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ConfigError, match=r"device 'cuda:2' .* 2 CUDA devices \(cuda:0 to cuda:1\)"):
        _resolve_device("cuda:2")


def test_a_huge_context_is_not_tokenised_whole(random_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory of megabytes would cost seconds and gigabytes to tokenise only to be cut to the
    model's positions: its middle goes before tokenising, and the result is the same middle cut."""
    from memabra.evals.mempo import _scorer

    scorer = MemPOScorer(random_model_dir, device="cpu")
    real = scorer._tokenizer
    seen: list[int] = []

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def __call__(self, texts: list[str], **kwargs: object) -> object:
            seen.extend(len(text) for text in texts)
            return real(texts, **kwargs)

    monkeypatch.setattr(scorer, "_tokenizer", Spy())
    middle = "bob likes green tea " * 100_000  # 2 MB
    huge = f"what is the capital of france ? {middle}the river flows north <answer>"
    scored = scorer.answer_probabilities([huge], ["paris"])
    assert max(seen) <= 256 * _scorer._CHARS_PER_TOKEN and scored.sequence_tokens.tolist() == [256]
    monkeypatch.setattr(_scorer, "_CHARS_PER_TOKEN", 10**9)  # tokenise it whole, then cut
    whole = scorer.answer_probabilities([huge], ["paris"])
    assert max(seen) > 2_000_000
    assert scored.probabilities[0] == pytest.approx(whole.probabilities[0], abs=1e-7)


def test_a_missing_tokenizer_or_unknown_architecture_is_a_one_line_error(
    tmp_path: Path, random_model_dir: Path
) -> None:
    """transformers' messages span several lines; the README promises a one-line error."""
    (tmp_path / "model.safetensors").write_bytes((random_model_dir / "model.safetensors").read_bytes())
    (tmp_path / "config.json").write_bytes((random_model_dir / "config.json").read_bytes())
    with pytest.raises(ConfigError, match="no usable tokenizer") as no_tokenizer:  # config and weights only
        MemPOScorer(tmp_path, device="cpu")
    assert "\n" not in str(no_tokenizer.value)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((random_model_dir / name).read_bytes())
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "no-such-architecture"}))
    with pytest.raises(ConfigError, match="the model does not load") as unknown:
        MemPOScorer(tmp_path, device="cpu")
    assert "\n" not in str(unknown.value)
