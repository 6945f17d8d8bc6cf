"""MemPO scorer throughput: tokens per second against batch size.

    python benchmarks/mempo_gpu.py [--model PATH] [--batch-sizes 1,2,4,8,16,32,64] [--repeats 5] [--json out.json]

Scores P_mem and P_full for every ``<mem>`` block of synthetic multi-turn trajectories (2 sequences
per block: the memory alone, the whole history) with :class:`memabra.evals.mempo.MemPOScorer`, once
per batch size, and prints the median tokens per second over the repeats (tokens = context and
answer tokens run through the model, padding excluded). Without ``--model`` it builds and saves a
randomly initialised model and a word-level tokenizer (no hub access needed): on CUDA a ~134M
parameter Llama-style model in bfloat16 (``--size base``); on the CPU a reduced one (``--size small``,
batch sizes up to 8), and it says so. Needs only torch, transformers, numpy and memabra.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

from memabra.evals.mempo import MemPOScorer, ScorerOutOfMemoryError, Trajectory, memory_probes


@dataclass(frozen=True)
class ModelSize:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    max_positions: int


SIZES = {
    "base": ModelSize(hidden=768, layers=12, heads=12, intermediate=2048, vocab=32000, max_positions=4096),
    "small": ModelSize(hidden=256, layers=4, heads=4, intermediate=688, vocab=8000, max_positions=2048),
    "tiny": ModelSize(hidden=32, layers=2, heads=4, intermediate=64, vocab=500, max_positions=1024),
}
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


def build_model(directory: Path, size: ModelSize, seed: int) -> None:
    """Save a word-level tokenizer over ``w0 … w{vocab-1}`` and a random Llama-style model."""
    vocab = {
        token: index for index, token in enumerate([*SPECIAL_TOKENS, *TAGS, *(f"w{i}" for i in range(size.vocab))])
    }
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([AddedToken(t, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t in TAGS])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])]
    )
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]"
    ).save_pretrained(directory)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        max_position_embeddings=size.max_positions,
        pad_token_id=vocab["[PAD]"],
        bos_token_id=vocab["[BOS]"],
        eos_token_id=vocab["[EOS]"],
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(directory)


def synthetic_trajectories(count: int, turns: int, vocab: int, seed: int) -> list[Trajectory]:
    """Search-then-answer trajectories with realistic block lengths: memories of 20-60 words, tool
    responses of 100-200, a question of 12 and a gold answer of 1-4."""
    rng = np.random.default_rng(seed)

    def words(low: int, high: int) -> str:
        return " ".join(f"w{i}" for i in rng.integers(0, vocab, size=int(rng.integers(low, high + 1))))

    out = []
    for _ in range(count):
        body = [
            f"<mem> {words(20, 60)} </mem> <think> {words(10, 30)} </think> <search> {words(4, 8)} </search> "
            f"<tool_response> {words(100, 200)} </tool_response>"
            for _ in range(turns - 1)
        ]
        body.append(f"<mem> {words(20, 60)} </mem> <think> {words(10, 30)} </think> <answer> {words(1, 4)} </answer>")
        out.append(Trajectory(question=words(12, 12), turns=tuple(body), gold_answer=words(1, 4)))
    return out


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    scorer: MemPOScorer, contexts: list[str], answers: list[str], batch_sizes: list[int], repeats: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for batch_size in batch_sizes:
        scorer.batch_size = batch_size
        if scorer.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(scorer.device)
        try:
            scorer.answer_probabilities(contexts[: 2 * batch_size], answers[: 2 * batch_size])  # warm-up
            seconds = []
            tokens = 0
            for _ in range(repeats):
                _synchronize(scorer.device)
                started = time.perf_counter()
                scored = scorer.answer_probabilities(contexts, answers)
                _synchronize(scorer.device)
                seconds.append(time.perf_counter() - started)
                tokens = int(scored.sequence_tokens.sum())
        except (ScorerOutOfMemoryError, torch.cuda.OutOfMemoryError):  # the scorer names its own
            rows.append({"batch_size": batch_size, "status": "out of memory"})
            torch.cuda.empty_cache()
            break
        median = statistics.median(seconds)
        row = {
            "batch_size": batch_size,
            "status": "ok",
            "tokens": tokens,
            "sequences": len(contexts),
            "seconds_median": median,
            "seconds": seconds,
            "tokens_per_second": tokens / median,
            "sequences_per_second": len(contexts) / median,
        }
        if scorer.device.type == "cuda":
            row["peak_memory_gib"] = torch.cuda.max_memory_allocated(scorer.device) / 2**30
        rows.append(row)
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a saved causal LM directory; default: build a random one")
    parser.add_argument(
        "--size", choices=["auto", *SIZES], default="auto", help="random model size (auto: base on CUDA, small on CPU)"
    )
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default 1..64 on CUDA, 1..8 on CPU)")
    parser.add_argument(
        "--trajectories", type=int, default=None, help="synthetic trajectories (default 64 on CUDA, 4 on CPU)"
    )
    parser.add_argument("--turns", type=int, default=4, help="turns per trajectory (one <mem> block each)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--padding-side", choices=["left", "right"], default="left")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    cuda = torch.cuda.is_available() and args.device != "cpu"
    size_name = args.size if args.size != "auto" else ("base" if cuda else "small")
    default_batch_sizes = [1, 2, 4, 8, 16, 32, 64] if cuda else [1, 2, 4, 8]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else default_batch_sizes
    n_trajectories = args.trajectories or (64 if cuda else 4)
    if not cuda:
        print("no CUDA device: running a reduced benchmark on the CPU (figures are not GPU figures)")
    with tempfile.TemporaryDirectory(prefix="mempo-bench-") as scratch:
        model_dir = args.model or Path(scratch)
        vocab = SIZES[size_name].vocab
        if args.model is None:
            build_model(model_dir, SIZES[size_name], args.seed)
        # with --model, a real tokenizer splits the words "w123" into pieces: fine for throughput
        scorer = MemPOScorer(model_dir, device=args.device, dtype=args.dtype, padding_side=args.padding_side)
        parameters: int = sum(p.numel() for p in scorer.model.parameters())
        trajectories = synthetic_trajectories(n_trajectories, args.turns, vocab, args.seed)
        probes = memory_probes(trajectories)
        contexts = [p.mem_context for p in probes] + [p.full_context for p in probes]
        answers = [p.gold_answer for p in probes] * 2
        rows = measure(scorer, contexts, answers, batch_sizes, args.repeats)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(scorer.device)
        if scorer.device.type == "cuda"
        else platform.processor() or "cpu",
        "device_type": scorer.device.type,
        "dtype": str(scorer.dtype).removeprefix("torch."),
        "model": str(args.model) if args.model else f"random Llama-style ({size_name})",
        "parameters": parameters,
        "padding_side": args.padding_side,
        "trajectories": n_trajectories,
        "turns": args.turns,
        "sequences": len(contexts),
        "repeats": args.repeats,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "results": rows,
    }
    print(
        f"{report['model']}, {parameters / 1e6:.1f}M parameters, {report['dtype']} on {report['device']}; "
        f"{len(contexts)} sequences ({n_trajectories} trajectories x {args.turns} <mem> blocks x 2), median of {args.repeats}"
    )
    print(f"{'batch':>6} {'tokens/s':>12} {'seq/s':>9} {'s/pass':>8} {'peak GiB':>9}")
    for row in rows:
        if row["status"] != "ok":
            print(f"{row['batch_size']:>6} {row['status']}")
            continue
        peak = f"{row['peak_memory_gib']:.2f}" if "peak_memory_gib" in row else "-"
        print(
            f"{row['batch_size']:>6} {row['tokens_per_second']:>12,.0f} {row['sequences_per_second']:>9,.1f} "
            f"{row['seconds_median']:>8.3f} {peak:>9}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        partial = args.json.with_name(f".{args.json.name}.tmp")
        partial.write_text(json.dumps(report, indent=2))
        partial.replace(args.json)  # a report killed mid-write leaves the previous file, not half of one
    return report


if __name__ == "__main__":
    main()
