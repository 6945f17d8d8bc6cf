"""featurize is a pure function with documented columns."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest

from memabra import Budget, Candidate, CandidateKind, InvalidRecordError, RouterError, RoutingContext
from memabra.router import (
    NUMERIC_FEATURES,
    CandidateStats,
    FeatureTable,
    Similarity,
    context_features,
    featurize,
    recall,
)

from .conftest import HashingEncoder

POOL = (
    Candidate(
        "lawyer",
        CandidateKind.TOOL,
        "lawyer.search: find divorce lawyers in a city",
        10,
        {"source": "registry"},
        usage=CandidateStats(4, 3),
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
    ),
    Candidate("doctor", CandidateKind.TOOL, "doctor.search: find doctors by specialty", 12),
    Candidate(
        "weather",
        CandidateKind.TOOL,
        "weather.get: forecast for a city",
        8,
        created_at=datetime(2025, 1, 11, tzinfo=UTC),
    ),
    Candidate("note", CandidateKind.MEMORY, "The user is going through a divorce in Los Angeles", 9),
)
CONTEXT = RoutingContext("find a divorce lawyer in Los Angeles", "u1", budget=Budget(max_tokens=100))


def column(table: FeatureTable, name: str) -> np.ndarray:
    return table.column(name)


def test_featurize_is_pure_and_aligned() -> None:
    sim = Similarity(encoder=HashingEncoder())
    first = featurize(CONTEXT, POOL, similarity=sim)
    second = featurize(CONTEXT, POOL, similarity=sim)
    assert [c.id for c in first.candidates] == [c.id for c in POOL]
    assert first.matrix.shape == (4, len(NUMERIC_FEATURES))
    np.testing.assert_array_equal(first.matrix, second.matrix)
    assert dict(first.rows[0]) == dict(second.rows[0])


def test_similarity_columns_are_per_kind() -> None:
    table = featurize(CONTEXT, POOL, similarity=Similarity())
    tools = [0, 1, 2]
    assert column(table, "lex")[0] > column(table, "lex")[1] > 0.0
    assert column(table, "lex_z")[tools].mean() == pytest.approx(0.0, abs=1e-12)
    assert column(table, "hyb_top")[0] == 1.0 and column(table, "hyb_rr")[0] == 1.0
    assert column(table, "hyb_gap")[0] > 0.0 > column(table, "hyb_gap")[1]
    # the lone memory is the best (and only) of its kind; a single value has no spread
    assert column(table, "hyb_top")[3] == 1.0 and column(table, "lex_z")[3] == 0.0
    # without an encoder the semantic columns are zero and the prior is lexical
    assert not column(table, "sem").any() and not column(table, "sem_z").any()
    np.testing.assert_allclose(column(table, "hyb_z"), column(table, "lex_z"))


def test_semantic_columns_with_an_encoder() -> None:
    table = featurize(CONTEXT, POOL, similarity=Similarity(encoder=HashingEncoder()))
    assert column(table, "sem")[0] > 0.0
    np.testing.assert_allclose(column(table, "hyb_z"), column(table, "lex_z") + column(table, "sem_z"))


def test_usage_cost_and_age_features() -> None:
    table = featurize(CONTEXT, POOL, similarity=Similarity())
    assert column(table, "chosen_log")[0] == pytest.approx(math.log1p(4))
    assert column(table, "helped_rate")[0] == pytest.approx((3 + 1) / (4 + 2))
    assert column(table, "helped_rate")[1] == pytest.approx(0.5) and column(table, "fresh")[1] == 1.0
    assert column(table, "tokens_share")[0] == pytest.approx(0.10)
    assert column(table, "tokens_log")[1] == pytest.approx(math.log1p(12))
    # ages count back from the newest created_at in the pool (no clock), or from an explicit now
    assert column(table, "age_log_days")[0] == pytest.approx(math.log1p(10))
    assert column(table, "age_known")[1] == 0.0
    later = featurize(CONTEXT, POOL, similarity=Similarity(), now=datetime(2025, 1, 21, tzinfo=UTC))
    assert column(later, "age_log_days")[0] == pytest.approx(math.log1p(20))
    assert table.rows[0]["kind=tool"] == 1.0 and table.rows[0]["source=registry"] == 1.0
    assert table.rows[1]["source=unknown"] == 1.0


def test_explicit_stats_override_usage() -> None:
    table = featurize(CONTEXT, POOL, stats={"lawyer": CandidateStats(10, 1)}, similarity=Similarity())
    assert column(table, "helped_rate")[0] == pytest.approx(2 / 12)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CandidateStats(times_chosen=float("nan")), "CandidateStats.times_chosen"),  # type: ignore[arg-type]
        (lambda: CandidateStats(times_chosen=-1), "CandidateStats.times_chosen"),
        (lambda: CandidateStats(times_helped=True), "CandidateStats.times_helped"),
        (lambda: Candidate("x", CandidateKind.TOOL, "x", 1, usage=(1, 0)), "Candidate.usage"),  # type: ignore[arg-type]
        (lambda: Candidate("x", CandidateKind.TOOL, "x", 1, created_at="yesterday"), "Candidate.created_at"),  # type: ignore[arg-type]
        (lambda: Candidate("x", CandidateKind.TOOL, "x", 1, created_at=datetime(2025, 1, 1)), "timezone-aware"),
        (lambda: Candidate("x", CandidateKind.TOOL, "x", 1, {"times_chosen": 3}), "usage=CandidateStats"),
    ],
)
def test_bad_usage_names_the_field(make: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        make()


def test_more_helps_than_choices_is_an_error() -> None:
    bad = Candidate("x", CandidateKind.TOOL, "x", 1, usage=CandidateStats(times_chosen=1, times_helped=2))
    with pytest.raises(RouterError, match="helped 2 times"):
        featurize(CONTEXT, [bad], similarity=Similarity())


def test_stored_rows_round_trip_and_missing_features_are_errors() -> None:
    table = featurize(CONTEXT, POOL, similarity=Similarity())
    rebuilt = FeatureTable.from_rows(table.candidates, table.rows)
    np.testing.assert_array_equal(rebuilt.matrix, table.matrix)
    broken = dict(table.rows[0])
    del broken["hyb_z"]
    with pytest.raises(RouterError, match="hyb_z"):
        FeatureTable.from_rows(table.candidates[:1], [broken])
    nan_row = {**table.rows[0], "lex": float("nan")}
    with pytest.raises(RouterError, match="lex"):
        FeatureTable.from_rows(table.candidates[:1], [nan_row])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "must be a number, got True"),
        ("0.5", "must be a number"),
        (None, "must be a number"),
        (math.inf, "not finite"),
    ],
)
def test_a_stored_value_that_is_not_a_finite_number_is_named(value: object, message: str) -> None:
    table = featurize(CONTEXT, POOL, similarity=Similarity())
    rows = [dict(row) for row in table.rows]
    rows[-1]["sem"] = value
    with pytest.raises(RouterError, match=f"feature 'sem' of candidate '{table.candidates[-1].id}' .*{message}"):
        FeatureTable.from_rows(table.candidates, rows)


def test_stored_rows_of_ints_numpy_scalars_and_older_logs_rebuild_the_same_table() -> None:
    table = featurize(CONTEXT, POOL, similarity=Similarity())
    as_numpy = [{name: np.float64(v) for name, v in row.items()} for row in table.rows]  # the checked path
    older = [{name: v for name, v in row.items() if name not in ("failed_here", "helped_here")} for row in table.rows]
    for rows in (as_numpy, older):
        np.testing.assert_array_equal(FeatureTable.from_rows(table.candidates, rows).matrix, table.matrix)
    whole = [{**row, "lex": round(row["lex"])} for row in table.rows]  # ints, as JSON may store them
    rebuilt = FeatureTable.from_rows(table.candidates, whole)
    np.testing.assert_array_equal(rebuilt.column("lex"), [float(round(v)) for v in table.column("lex")])
    with pytest.raises(RouterError, match="2 stored feature rows for 1 candidates"):
        FeatureTable.from_rows(table.candidates[:1], table.rows[:2])


def test_context_features_and_recall() -> None:
    features = context_features(RoutingContext("divorce lawyer lawyer", "u1", turn=3))
    assert features["q=lawyer"] == 2.0 and features["user=u1"] == 1.0
    assert features["turn_log"] == pytest.approx(math.log1p(3)) and features["kinds=tool"] == 1.0
    table = featurize(CONTEXT, POOL, similarity=Similarity())
    assert recall(table, None) == (0, 1, 2, 3)
    kept = recall(table, 1)
    assert kept == (0, 3)  # the best tool and the only memory, in pool order
