"""The GPU benchmark script runs end to end (tiny model, CPU) and writes its JSON report."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the MemPO benchmark needs the mempo extra (torch)")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mempo_gpu.py"


def test_the_benchmark_reports_tokens_per_second_per_batch_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("mempo_gpu_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    out = tmp_path / "bench.json"
    argv = [
        "--size",
        "tiny",
        "--device",
        "cpu",
        "--batch-sizes",
        "1,4",
        "--trajectories",
        "2",
        "--turns",
        "2",
        "--repeats",
        "1",
    ]
    report = module.main([*argv, "--json", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["dtype"] == "float32" and report["sequences"] == 2 * 2 * 2
    assert [row["batch_size"] for row in report["results"]] == [1, 4]
    assert all(row["status"] == "ok" and row["tokens_per_second"] > 0 for row in report["results"])
    assert report["results"][0]["tokens"] == report["results"][1]["tokens"]


def test_a_batch_size_that_runs_out_of_memory_ends_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    spec = importlib.util.spec_from_file_location("mempo_gpu_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    module.build_model(tmp_path, module.SIZES["tiny"], seed=0)
    scorer = module.MemPOScorer(tmp_path, device="cpu")
    real_forward = scorer.model.forward

    def forward(*args: object, input_ids: torch.Tensor, **kwargs: object) -> object:
        if input_ids.shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_forward(*args, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(scorer.model, "forward", forward)
    probes = module.memory_probes(module.synthetic_trajectories(2, 2, 500, seed=0))
    contexts = [p.mem_context for p in probes] + [p.full_context for p in probes]
    rows = module.measure(scorer, contexts, [p.gold_answer for p in probes] * 2, [1, 2, 4, 8], repeats=1)
    assert [(row["batch_size"], row["status"]) for row in rows] == [(1, "ok"), (2, "ok"), (4, "out of memory")]
