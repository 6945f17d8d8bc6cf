"""Input checks for the estimators. Every failure names the field and the rounds at fault."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memabra._errors import InvalidRecordError

__all__ = [
    "OPEInputError",
    "as_float_array",
    "as_index_array",
    "as_distribution_array",
    "check_in_range",
    "check_same_length",
]

_SHOWN_ROUNDS = 5
# action_dist comes from float arithmetic in a policy; obp accepts np.allclose's default, we are a
# little stricter than its 1e-5 relative slack and report the rows that miss.
_SUM_TOLERANCE = 1e-6


class OPEInputError(InvalidRecordError):
    """An array handed to an off-policy estimator is malformed; ``field`` names which one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _rounds(mask: NDArray[np.bool_]) -> str:
    bad = np.flatnonzero(mask)
    shown = ", ".join(str(int(i)) for i in bad[:_SHOWN_ROUNDS])
    more = f", ... ({bad.size} in all)" if bad.size > _SHOWN_ROUNDS else ""
    return f"[{shown}{more}]"


def _first_bad(values: NDArray[Any], mask: NDArray[np.bool_]) -> str:
    return repr(float(values[mask][0]))


def as_float_array(
    name: str,
    value: object,
    ndim: int,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> NDArray[np.float64]:
    """``value`` as a contiguous float64 array of ``ndim`` dimensions, every entry finite and,
    when ``low`` and ``high`` are given, in ``(low, high]`` (``low_open``) or ``[low, high]``."""
    array = np.asarray(value)
    if array.ndim != ndim:
        raise OPEInputError(name, f"{name} must be a {ndim}-D array; got shape {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise OPEInputError(name, f"{name} must hold numbers; got dtype {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.float64)
    if array.size == 0:
        return array
    if low is None or high is None:
        # one pass settles finiteness: a NaN or an inf makes the sum NaN or inf (einsum's plain
        # sum is faster than np.sum's pairwise one, and its rounding does not matter here)
        if not math.isfinite(float(np.einsum("i->", array.reshape(-1)))):
            _check_finite(name, array)  # passes when finite values merely overflowed the sum
        return array
    # min and max propagate NaN and expose inf, so two fast reductions settle finiteness and range
    # at once; the offending rounds are located only when something is wrong
    smallest, largest = float(array.min()), float(array.max())
    if not (math.isfinite(smallest) and math.isfinite(largest)):
        _check_finite(name, array)
    below = smallest <= low if low_open else smallest < low
    if below or largest > high:
        rows = array.reshape(array.shape[0], -1)
        check_in_range(name, rows.min(axis=1), low=low, high=high, low_open=low_open)
        check_in_range(name, rows.max(axis=1), low=low, high=high, low_open=low_open)
    return array


def _check_finite(name: str, array: NDArray[Any]) -> None:
    """Raise naming the first non-finite value and the rounds that hold one, if any."""
    finite = np.isfinite(array)
    if finite.all():
        return
    per_round = finite.reshape(finite.shape[0], -1).all(axis=1)
    bad_value = float(array[~finite].flat[0])
    raise OPEInputError(name, f"{name} must be finite; got {bad_value!r} at rounds {_rounds(~per_round)}")


def as_index_array(name: str, value: object, upper: int, upper_name: str) -> NDArray[np.int64]:
    """``value`` as a 1-D int64 array with every entry in ``[0, upper)``."""
    array = np.asarray(value)
    if array.ndim != 1:
        raise OPEInputError(name, f"{name} must be a 1-D array; got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise OPEInputError(name, f"{name} must hold integers; got dtype {array.dtype}")
    array = array.astype(np.int64, copy=False)
    if array.size == 0 or (array.min() >= 0 and array.max() < upper):  # two reductions, no masks
        return array
    outside = (array < 0) | (array >= upper)
    if outside.any():
        raise OPEInputError(
            name,
            f"{name} must be in [0, {upper}) ({upper_name}); got {int(array[outside][0])} at rounds {_rounds(outside)}",
        )
    return array


def check_in_range(name: str, values: NDArray[np.float64], *, low: float, high: float, low_open: bool) -> None:
    """Raise unless every value lies in ``(low, high]`` (``low_open``) or ``[low, high]``."""
    below = values <= low if low_open else values < low
    outside = below | (values > high)
    if outside.any():
        bracket = "(" if low_open else "["
        raise OPEInputError(
            name,
            f"{name} must be in {bracket}{low:g}, {high:g}]; got {_first_bad(values, outside)} "
            f"at rounds {_rounds(outside)}",
        )


def check_same_length(reference: str, n_rounds: int, arrays: dict[str, NDArray[Any] | None]) -> None:
    """Raise when any present array's first axis disagrees with ``n_rounds`` (taken from ``reference``)."""
    for name, array in arrays.items():
        if array is not None and array.shape[0] != n_rounds:
            raise OPEInputError(
                name, f"{name} has {array.shape[0]} rounds but {reference} has {n_rounds}; the lengths must agree"
            )


def as_distribution_array(name: str, value: object) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``value`` as a contiguous float64 array ``(n_rounds, n_actions, len_list)`` holding, at every
    round and position, a distribution over actions (entries >= 0 summing to 1), and those sums
    over actions, shape ``(n_rounds, len_list)`` (the reward model's policy average divides by them).

    Two passes over the array: the minimum (which NaN and -inf also fail) and the sums over
    actions (which +inf fails); entries >= 0 that sum to 1 cannot exceed 1 (by more than the
    tolerance). The sums are then judged by their own minimum and maximum, so no temporary of the
    sums' size is made unless a row is off.
    """
    array = np.asarray(value)
    if array.ndim != 3:
        raise OPEInputError(name, f"{name} must be a 3-D array; got shape {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise OPEInputError(name, f"{name} must hold numbers; got dtype {array.dtype}")
    if array.shape[1] == 0 or array.shape[2] == 0:
        raise OPEInputError(name, f"{name} needs at least one action and one position; got shape {array.shape}")
    array = np.ascontiguousarray(array, dtype=np.float64)
    sums = np.einsum("nak->nk", array)  # the sum over actions; several times faster than .sum(axis=1)
    if array.size == 0:
        return array, sums
    smallest = float(array.min())
    if not smallest >= 0.0:  # also true for NaN
        rows = array.reshape(array.shape[0], -1)
        as_float_array(name, rows, 2)  # names NaN and -inf rounds first
        check_in_range(name, rows.min(axis=1), low=0.0, high=1.0, low_open=False)
    low, high = 1.0 - _SUM_TOLERANCE, 1.0 + _SUM_TOLERANCE
    if not (low <= float(sums.min()) and float(sums.max()) <= high):  # a NaN sum fails both
        off = ~((sums >= low) & (sums <= high))
        if not np.isfinite(sums).all():
            as_float_array(name, array, 3)
        raise OPEInputError(
            name,
            f"{name} must sum to 1 over actions at every round and position; got {float(sums[off][0])!r} "
            f"at rounds {_rounds(off.any(axis=1))}",
        )
    return array, sums
