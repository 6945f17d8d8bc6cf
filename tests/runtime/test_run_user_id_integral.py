"""A run's ``user_id`` taken from a DataFrame or an array is a NumPy integer (``numpy.int64``), not
an ``int``: it names the same user as the ``int`` (its text is the same), so it is taken as one,
while a NumPy boolean is refused as ``bool`` is."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from memabra import InvalidRecordError
from memabra._graph_io import run_user_id


@pytest.mark.parametrize("given", [np.int64(42), np.int32(42), np.uint16(42)])
def test_a_numpy_integer_user_id_is_the_same_user_as_the_int(given: object) -> None:
    assert run_user_id(SimpleNamespace(context={"user_id": given})) == "42"
    assert run_user_id(None, {"configurable": {"user_id": given}}) == "42"


def test_a_numpy_boolean_user_id_is_refused_as_a_bool_is() -> None:
    with pytest.raises(InvalidRecordError, match="must be a string, an integer or a UUID"):
        run_user_id(SimpleNamespace(context={"user_id": np.bool_(True)}))
