"""The README's MemPO snippet runs as written, on a tiny local model and a scratch log."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _mempo_snippet() -> str:
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", README.read_text(encoding="utf-8"), re.DOTALL | re.MULTILINE)
    [snippet] = [textwrap.dedent(body) for _, body in blocks if "MemPOScorer" in body]
    return snippet


def test_the_readme_mempo_snippet_runs(
    random_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memabra.storage import upgrade

    snippet = _mempo_snippet()
    assert '"/models/qwen2.5-0.5b"' in snippet, "the README names this model path; update the substitution"
    monkeypatch.chdir(tmp_path)
    upgrade("sqlite:///memabra.db")  # the log `memabra demo` or an agent would have made
    source = snippet.replace('"/models/qwen2.5-0.5b"', repr(str(random_model_dir))).replace(
        'device="auto"', 'device="cpu"'
    )
    namespace: dict[str, object] = {}
    exec(compile(source, "README.md (MemPO)", "exec"), namespace)
    assert "d1" in capsys.readouterr().out and namespace["labels"] == {}
