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
