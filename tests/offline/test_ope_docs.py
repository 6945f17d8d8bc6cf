"""The Python examples of docs/ope.md run as written, so they cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from logged_world import log_world
from memabra.router import RandomRouter, Similarity
from memabra.storage import EpisodeLog, upgrade

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "ope.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_docs_have_python_examples_for_a_log_a_custom_router_and_the_arrays() -> None:
    code = "\n".join(_python_blocks())
    for name in ("evaluate_on_log", "evaluate_policies", "class LexicalTopOne(Router)", "InverseProbabilityWeighting"):
        assert name in code, name


def test_the_python_examples_run_on_a_logged_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "sqlite:///memabra.db"  # the examples' own URL, relative to the working directory
    monkeypatch.chdir(tmp_path)
    upgrade(url)
    with EpisodeLog(url) as log:
        log_world(log, RandomRouter(similarity=Similarity(encoder=None), seed=1), 300)
    namespace: dict[str, object] = {"__name__": "docs_ope"}
    try:
        for block in _python_blocks():  # in order: later blocks use what earlier ones defined
            exec(compile(block, str(DOC), "exec"), namespace)
    finally:
        log = namespace.get("log")
        if isinstance(log, EpisodeLog):
            log.close()
    printed = capsys.readouterr().out
    assert "hybrid cdr" in printed or "hybrid pi" in printed
    assert "on 300 decisions" in printed
    assert "lexical top-1" in printed
    assert "truth" in printed and "ipw" in printed
