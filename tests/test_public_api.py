"""The public surface: every name in each ``__all__`` resolves, and nothing private leaks into it."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "memabra",
        "memabra.router",
        "memabra.storage",
        "memabra.evals.ope",
        "memabra.evals.offline",
        "memabra.evals.mempo",
    ],
)
def test_every_exported_name_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__all__, module
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name}"
        assert not name.startswith("_") or name == "__version__"


def test_every_public_record_and_error_is_exported() -> None:
    """Records the public API takes or returns are importable from ``memabra`` itself."""
    import inspect

    import memabra
    from memabra import _errors, _records

    helpers = {"new_id", "utcnow", "ensure_sequence"}
    for module in (_records, _errors):
        for name, value in vars(module).items():
            if name.startswith("_") or name in helpers or getattr(value, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(value):
                assert name in memabra.__all__, f"{module.__name__}.{name} is not exported from memabra"


def test_lazy_exports_resolve_to_what_they_name() -> None:
    import memabra
    from memabra._admin import create_app

    assert memabra.create_admin_app is create_app
    assert "create_admin_app" in memabra.__all__
    assert sorted(set(memabra.__all__)) == sorted(memabra.__all__)  # no name twice


def _pyproject() -> dict[str, object]:
    import tomllib
    from pathlib import Path

    return tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))


def _requirement_names(requirements: list[str]) -> set[str]:
    import re

    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_all_extra_installs_what_the_readme_names() -> None:
    import re
    from pathlib import Path

    extras: dict[str, list[str]] = _pyproject()["project"]["optional-dependencies"]  # type: ignore[index]
    everything = set(re.search(r"memabra\[([^\]]+)\]", " ".join(extras["all"])).group(1).split(","))  # type: ignore[union-attr]
    assert everything == set(extras) - {"all", "test"}, "[all] must include every extra but test"
    names = _requirement_names([r for extra in everything for r in extras[extra]]) | _requirement_names(extras["all"])
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    named = {
        "SqliteSaver": "langgraph-checkpoint-sqlite",
        "PostgresSaver": "langgraph-checkpoint-postgres",
        "PostgresStore": "langgraph-checkpoint-postgres",
        "init_chat_model": "langchain",
        "sentence-transformers": "sentence-transformers",
        "matplotlib": "matplotlib",
        "psycopg": "psycopg",
        "uvicorn": "uvicorn",
    }
    for mention, package in named.items():
        if mention in readme:
            assert package in names, f"the README names {mention}, but [all] does not install {package}"


def test_lint_and_type_gates_are_configured() -> None:
    config = _pyproject()
    test_extra = _requirement_names(config["project"]["optional-dependencies"]["test"])  # type: ignore[index]
    assert {"ruff", "mypy"} <= test_extra
    ruff = config["tool"]["ruff"]  # type: ignore[index]
    assert ruff["line-length"] == 120 and ruff["target-version"] == "py311"  # type: ignore[index]
    assert set(ruff["lint"]["select"]) == {"E", "F", "I", "UP", "B", "SIM"}  # type: ignore[index]
    mypy = config["tool"]["mypy"]  # type: ignore[index]
    assert mypy["strict"] is True  # type: ignore[index]
    # nothing may opt a module out of strict checking again
    assert not [o for o in mypy.get("overrides", []) if "strict" in o or "ignore_errors" in o]  # type: ignore[union-attr]
