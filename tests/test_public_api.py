"""The public surface: every name in each ``__all__`` resolves, and nothing private leaks into it."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["memabra", "memabra.router", "memabra.storage", "memabra.evals.ope", "memabra.evals.offline", "memabra.evals.mempo"])
def test_every_exported_name_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__all__, module
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name}"
        assert not name.startswith("_") or name == "__version__"
