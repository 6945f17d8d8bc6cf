"""What a downstream developer imports from ``memabra`` is what a type checker sees, and one base
class catches every error memabra raises on purpose."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import memabra

INIT = Path(__file__).resolve().parents[2] / "memabra" / "__init__.py"


def _module() -> ast.Module:
    return ast.parse(INIT.read_text(encoding="utf-8"))


def _lazy() -> dict[str, str]:
    for node in _module().body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return value
    raise AssertionError("memabra/__init__.py has no _LAZY table")


def _imports(body: list[ast.stmt]) -> dict[str, str]:
    """name bound -> "module:attribute" for the ``from module import attribute as name`` in body."""
    found: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}:{alias.name}"
    return found


def _type_checking_imports() -> dict[str, str]:
    for node in _module().body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            return _imports(node.body)
    return {}


def test_every_lazy_name_is_imported_for_type_checkers_from_where_it_loads() -> None:
    """Without these imports ``mypy --strict`` types each lazy name by ``__getattr__`` as ``object``:
    ``create_memabra_agent(...)`` in the README's Quickstart is then "object not callable"."""
    lazy = {name: target if ":" in target else f"{target}:{name}" for name, target in _lazy().items()}
    assert _type_checking_imports() == lazy


def test_all_is_exactly_the_eager_and_lazy_names() -> None:
    eager = set(_imports(_module().body)) - {"TYPE_CHECKING"}
    exported = set(memabra.__all__)
    assert exported == eager | set(_lazy()) | {"__version__"}
    assert not eager & set(_lazy()), "a name both imported and loaded lazily"
    assert len(memabra.__all__) == len(exported), "a name listed twice in __all__"


def test_one_base_class_catches_every_public_memabra_error() -> None:
    public = [
        "router",
        "storage",
        "evals",
        "evals.ope",
        "evals.offline",
        "evals.mempo",
        "evals.bench",
        "evals.simulator",
    ]
    modules = [memabra] + [importlib.import_module(f"memabra.{name}") for name in public]
    errors = {
        f"{module.__name__}.{name}": value
        for module in modules
        for name in getattr(module, "__all__", ())
        if inspect.isclass(value := getattr(module, name)) and issubclass(value, BaseException)
    }
    assert "memabra.storage.DatabaseUnavailableError" in errors, sorted(errors)
    assert [n for n, cls in errors.items() if not issubclass(cls, memabra.MemabraError)] == []
