"""The router and offline-evaluation pages name code: files, the module a constant or function lives
in, and constants with their values. A rename or a move in the code must not leave the page
pointing at nothing, so each such reference is checked against the source itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [DOCS / name for name in ("router.md", "ope.md", "custom_router.md")]
# files a page names as removed on purpose ("What was removed: ...")
REMOVED = {"router/_request_memory.py"}

_PATH = re.compile(r"`((?:router|evals|storage|memabra|benchmarks|tests)/[\w/]+\.py)`")
# "`NAME` ... in `path.py`" and "`NAME`, `OTHER` (`path.py`": names the page places in a module
_IN_MODULE = re.compile(r"`(\w+)` in `((?:router|evals|storage|memabra)/[\w/]+\.py)`")
_GROUP = re.compile(r"((?:`\w+`,?\s+)+)\(`((?:router|evals|storage|memabra)/[\w/]+\.py)`")
# "`NAME` = 0.2", "`NAME` = 20%", "`NAME` = 1e-3", "`NAME = 0.5`"
_VALUE = re.compile(r"`([A-Z][A-Z0-9_]+)`? = (\d[\d.e-]*)(%?)")


def _defined(path: Path) -> dict[str, object]:
    """Top-level names ``path`` defines (functions, classes, assignments), with literal values."""
    names: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = None
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    names[target.id] = ast.literal_eval(value) if value is not None else None
                except ValueError:
                    names[target.id] = None
    return names


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_file_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = sorted({p for p in _PATH.findall(text) if p not in REMOVED and not (ROOT / p).is_file()})
    assert not missing, f"{page.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_name_a_page_places_in_a_module_is_defined_there(page: Path) -> None:
    text = _flat(page.read_text(encoding="utf-8"))
    claims: set[tuple[str, str]] = set(_IN_MODULE.findall(text))
    for group, path in _GROUP.findall(text):
        claims.update((name, path) for name in re.findall(r"`(\w+)`", group))
    wrong = sorted(
        f"{name} in {path}" for name, path in claims if (ROOT / path).is_file() and name not in _defined(ROOT / path)
    )
    assert not wrong, f"{page.name} places names in modules that do not define them: {wrong}"


@pytest.mark.parametrize(
    ("page", "required"),
    [
        ("router.md", {"PRIOR_OFFSET", "PRIOR_SCALE"}),
        ("ope.md", {"MAX_FLOOR_SHARE", "MEAN_WEIGHT_TOLERANCE", "MIN_EFFECTIVE_SAMPLE_SIZE", "NON_ADDITIVE_SHARE"}),
    ],
)
def test_constants_a_page_gives_values_for_match_the_code(page: str, required: set[str]) -> None:
    text = _flat((DOCS / page).read_text(encoding="utf-8"))
    defined: dict[str, object] = {}
    for folder in ("router", "evals"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            defined.update({k: v for k, v in _defined(path).items() if k.isupper() and isinstance(v, int | float)})
    checked = set()
    for name, number, percent in _VALUE.findall(text):
        if name not in defined:
            continue
        value = float(number.rstrip(".")) / (100 if percent else 1)
        assert defined[name] == pytest.approx(value), (
            f"{page} says {name} = {number}{percent}; the code has {defined[name]}"
        )
        checked.add(name)
    assert required <= checked, f"{page} no longer gives {sorted(required - checked)} as `NAME` = value"
