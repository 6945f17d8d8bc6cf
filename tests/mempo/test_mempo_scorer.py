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

from memabra.evals.mempo import MemPOScorer  # noqa: E402

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
