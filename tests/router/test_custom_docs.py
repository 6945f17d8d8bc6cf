"""docs/custom_router.md's snippets run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "custom_router.md"


def test_the_custom_router_page_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "custom_router_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the page's own code
    router = namespace["router"]
    assert router.credit["ann"]["t-weather"] > 0  # type: ignore[attr-defined]
