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
        "memabra.evals.bench",
        "memabra.evals.simulator",
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
    from memabra._feedback_http import END_USER_FEEDBACK_KEYS, agent_server_user, feedback_app

    assert memabra.feedback_app is feedback_app
    assert memabra.agent_server_user is agent_server_user
    assert memabra.END_USER_FEEDBACK_KEYS is END_USER_FEEDBACK_KEYS
    assert {"feedback_app", "agent_server_user", "END_USER_FEEDBACK_KEYS"} <= set(memabra.__all__)
    assert sorted(set(memabra.__all__)) == sorted(memabra.__all__)  # no name twice


_PUBLIC_PACKAGES = (
    "memabra",
    "memabra.router",
    "memabra.storage",
    "memabra.evals",
    "memabra.evals.ope",
    "memabra.evals.offline",
    "memabra.evals.mempo",
    "memabra.evals.bench",
    "memabra.evals.simulator",
)


def test_every_public_package_says_what_it_exports() -> None:
    """An explicit ``__all__`` in each public package, naming every public name it defines or imports
    (a name left out is public by accident: ``from ... import *`` drops it, a type checker hides it)."""
    import __future__

    import inspect
    import typing

    for package in _PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        assert isinstance(getattr(module, "__all__", None), list), f"{package} has no explicit __all__"
        defined = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and not inspect.ismodule(value)
            # TYPE_CHECKING, Any, annotations: imported to write the module, not the package's API
            and not any(getattr(tool, name, None) is value for tool in (typing, __future__))
        }
        assert defined <= set(module.__all__), (
            f"{package} defines {sorted(defined - set(module.__all__))} outside __all__"
        )


class _Unresolved:
    """Stands in for a name imported for type checking only; ``Runtime[Any]`` still resolves."""

    def __class_getitem__(cls, item: object) -> type[_Unresolved]:
        return cls


def _annotated_classes(obj: object) -> set[type]:
    """The memabra classes ``obj``'s annotations name (``list[Turn] | None`` names ``Turn``)."""
    import typing

    names: dict[str, object] = {}
    for _ in range(20):
        try:
            hints = typing.get_type_hints(obj, localns=names)
            break
        except NameError as exc:  # imported for type checking only (EpisodeLog, a scikit-learn estimator)
            names[str(exc.name)] = _Unresolved
    else:
        raise AssertionError(f"cannot resolve the annotations of {obj!r}")
    found: set[type] = set()
    pending = list(hints.values())
    while pending:
        hint = pending.pop()
        pending.extend(typing.get_args(hint))
        origin = typing.get_origin(hint)
        for candidate in (hint, origin):
            if isinstance(candidate, type) and candidate.__module__.startswith("memabra"):
                found.add(candidate)
    return found


def _annotated_api(value: object) -> list[tuple[str, object]]:
    """Every callable and field of an exported name whose annotations a user reads: a function, or a
    class's public methods, properties and dataclass fields (its memabra bases' too), hooks a
    framework calls included (LangChain's ``before_agent``, overridden by ``MemabraMiddleware``): a
    user subclassing the class writes them with the same annotations."""
    import inspect

    if inspect.isfunction(value):
        return [("", value)]
    if not inspect.isclass(value):
        return []
    out: list[tuple[str, object]] = [("", value)] if hasattr(value, "__dataclass_fields__") else []
    for klass in reversed(value.__mro__):
        if not klass.__module__.startswith("memabra"):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") and name not in ("__init__", "__call__"):
                continue
            function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if inspect.isfunction(function):
                out.append((f".{name}", function))
    return out


def test_no_public_signature_names_a_class_users_cannot_import() -> None:
    """A public function, method or record whose annotation is a class no public package exports
    leaves a user unable to annotate their own code with it (or to subclass a protocol)."""
    exported: set[int] = set()
    api: list[tuple[str, object]] = []
    for package in _PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            exported.add(id(value))
            api.extend((f"{package}.{name}{member}", obj) for member, obj in _annotated_api(value))
    hidden = sorted(
        {
            f"{where} names {klass.__module__}.{klass.__qualname__}"
            for where, obj in api
            for klass in _annotated_classes(obj)
            if id(klass) not in exported
        }
    )
    assert not hidden, "\n".join(hidden)


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
