"""docs/custom_router.md's snippets run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "custom_router.md"


def _run_page() -> tuple[str, dict[str, object]]:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "custom_router_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the page's own code
    return text, namespace


def test_the_custom_router_page_runs() -> None:
    _text, namespace = _run_page()
    router = namespace["router"]
    assert router.credit["ann"]["t-weather"] > 0  # type: ignore[attr-defined]


def test_every_router_the_page_names_by_import_path_is_on_the_page() -> None:
    # the page named my_routers:TemperatureRouter, a class it never defines (its softmax is SoftmaxRouter)
    text, namespace = _run_page()
    named = set(re.findall(r"my_routers:(\w+)", text))
    assert named
    undefined = sorted(n for n in named if n not in namespace and f"def {n}(" not in text)
    assert not undefined, f"docs/custom_router.md names my_routers:{undefined} but defines no such router"
