"""The row boundary: what both databases accept, checked the same way, and bulk inserts.

PostgreSQL refuses what SQLite silently stores: a NUL byte in a text or JSON value, a lone UTF-16
surrogate, a string longer than its ``VARCHAR(n)``, an integer that does not fit its column. Every
row passes :func:`prepare` before it is written, on both backends, so a test on SQLite sees what
PostgreSQL would refuse:

- text (columns and strings anywhere inside JSON): NUL bytes are removed and lone surrogates
  replaced by U+FFFD, because both are noise from a tool or a paste and refusing them would lose
  the user's turn;
- ``VARCHAR(n)`` columns (ids, names) longer than ``n`` after that, and integers outside a 32-bit
  ``INTEGER`` (or 64-bit ``BIGINT``) column, are refused with
  :class:`~memabra._errors.InvalidRecordError` naming the table and column: they cannot be
  shortened without changing what they identify.

:func:`insert_batches` writes a batch through ``COPY`` on PostgreSQL (pipelined INSERTs, one round
trip for all tables, when the batch is small) and one ``executemany`` per table on SQLite, with
JSON serialised once here.
"""

from __future__ import annotations

import json
import operator
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Connection, Dialect, Integer, LargeBinary, String, Table

from memabra._errors import InvalidRecordError

__all__ = ["COPY_MIN_ROWS", "bulk_insert", "clean_json", "clean_text", "insert_batches", "prepare"]

_INT_BOUNDS = {"int32": 2**31, "int64": 2**63}


def clean_text(value: str) -> str:
    """``value`` without NUL bytes and with every lone surrogate replaced by U+FFFD."""
    if "\x00" in value:
        value = value.replace("\x00", "")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # surrogatepass keeps valid pairs (joined again on decode); lone halves become U+FFFD.
            value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def clean_json(value: Any) -> Any:
    """A JSON value with :func:`clean_text` applied to every string in it, keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for every value, built once: json.dumps with a non-default argument (allow_nan)
# builds a new encoder per call, which costs more than encoding a candidate's features. The C
# encoder is CPython's accelerator (the one json.dumps uses); without it, the Python encoder.
_ENCODER = json.JSONEncoder(allow_nan=False)
_MAKE_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # untyped in typeshed
_C_ENCODE: Any = (
    _MAKE_C_ENCODER(None, _not_json, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, False)
    if _MAKE_C_ENCODER is not None
    else None
)


def _encode(value: Any) -> str:
    if _C_ENCODE is not None:
        return "".join(_C_ENCODE(value, 0))
    return _ENCODER.encode(value)


def dump_json(value: Any, where: str) -> str:
    """Serialise a JSON column value once, cleaning it only when the fast scan finds something."""
    if not value and isinstance(value, (dict, list, tuple)):
        return "{}" if isinstance(value, dict) else "[]"
    try:
        text = _encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidRecordError(f"{where} is not JSON-serialisable: {exc}") from None
    # ensure_ascii (the default) writes NUL as \u0000 and a surrogate as \ud800-\udfff: one C-level
    # substring scan rules out both for almost every value.
    if "\\u0000" in text or "\\ud" in text:
        text = _encode(clean_json(value))
    return text


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    kind: str  # "str" (VARCHAR(n)), "text", "int32", "int64", "json", "bool", "other"
    limit: int | None


@cache
def _columns(table: Table) -> tuple[_Column, ...]:
    out = []
    for col in table.columns:
        t = col.type
        impl = getattr(t, "impl", t)
        if isinstance(t, JSON) or isinstance(impl, JSON) or "JSON" in type(t).__name__.upper():
            kind, limit = "json", None
        elif isinstance(t, Boolean):
            kind, limit = "bool", None
        elif isinstance(t, BigInteger):
            kind, limit = "int64", None
        elif isinstance(t, Integer):
            kind, limit = "int32", None
        elif isinstance(t, LargeBinary):
            kind, limit = "other", None
        elif isinstance(t, String):
            kind, limit = ("str", t.length) if t.length else ("text", None)
        else:
            kind, limit = "other", None
        out.append(_Column(col.name, kind, limit))
    return tuple(out)


def _clean(table: Table, col: _Column, value: Any, *, serialise_json: bool) -> Any:
    if value is None:
        return None
    kind = col.kind
    if kind == "text" or kind == "str":
        if not isinstance(value, str):
            return value
        value = clean_text(value)
        if col.limit is not None and len(value) > col.limit:
            raise InvalidRecordError(
                f"{table.name}.{col.name} holds at most {col.limit} characters, got {len(value)} ({value[:40]!r}...)"
            )
        return value
    if kind == "int32" or kind == "int64":
        bound = _INT_BOUNDS[kind]
        if isinstance(value, int) and not isinstance(value, bool) and not -bound <= value < bound:
            bits = 32 if kind == "int32" else 64
            raise InvalidRecordError(f"{table.name}.{col.name} is a {bits}-bit integer column; {value} does not fit")
        return value
    if kind == "json":
        text = dump_json(value, f"{table.name}.{col.name}")
        return text if serialise_json else json.loads(text)
    return value


def prepare(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows as dicts ready for a Core ``insert`` / ``update``: text cleaned, ids and integers checked."""
    columns = [c for c in _columns(table)]
    out = []
    for row in rows:
        clean = dict(row)
        for col in columns:
            if col.name in clean:
                clean[col.name] = _clean(table, col, clean[col.name], serialise_json=False)
        out.append(clean)
    return out


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to turn a row dict into a tuple for one table and dialect, touching only the columns
    that need a check, a serialisation or a driver conversion."""

    names: tuple[str, ...]
    getter: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    texts: tuple[tuple[int, _Column, int], ...]  # (index, column, max length; 2**62 for TEXT)
    ints: tuple[tuple[int, _Column, int], ...]  # (index, column, bound)
    jsons: tuple[tuple[int, _Column], ...]
    procs: tuple[tuple[int, Any], ...]  # SQLAlchemy bind processors (datetimes on SQLite)


# Plans per dialect, held weakly: a cache holding the dialect held its engine for the process's
# life (the engine's event listeners close over it), pool and compiled statements included.
_PLANS: weakref.WeakKeyDictionary[Dialect, dict[Table, _Plan]] = weakref.WeakKeyDictionary()


def _plan(table: Table, dialect: Dialect) -> _Plan:
    plans = _PLANS.get(dialect)
    if plans is None:
        plans = _PLANS.setdefault(dialect, {})
    found = plans.get(table)
    if found is None:
        found = plans[table] = _new_plan(table, dialect)
    return found


def _new_plan(table: Table, dialect: Dialect) -> _Plan:
    dialect_name = dialect.name
    columns = _columns(table)
    names = tuple(c.name for c in columns)
    texts, ints, jsons, procs = [], [], [], []
    for i, (col, spec) in enumerate(zip(table.columns, columns, strict=True)):
        if spec.kind in ("str", "text"):
            texts.append((i, spec, spec.limit if spec.limit is not None else 2**62))
        elif spec.kind in _INT_BOUNDS:
            ints.append((i, spec, _INT_BOUNDS[spec.kind]))
        elif spec.kind == "json":
            jsons.append((i, spec))
        # psycopg's COPY adapts datetimes itself; sqlite3 needs SQLAlchemy's text format.
        if dialect_name == "sqlite" and spec.kind not in ("json", "bool", "str", "text", "int32", "int64"):
            proc = col.type.dialect_impl(dialect).bind_processor(dialect)
            if proc is not None:
                procs.append((i, proc))
    return _Plan(names, operator.itemgetter(*names), tuple(texts), tuple(ints), tuple(jsons), tuple(procs))


def _as_tuple(table: Table, plan: _Plan, row: Mapping[str, Any]) -> tuple[Any, ...]:
    try:
        values = list(plan.getter(row))
    except KeyError:  # a row that leaves nullable columns out
        values = [row.get(n) for n in plan.names]
    # Inline fast paths (this runs for every value of every bulk row); what they do not clear
    # goes through _clean, which cleans the value or names the problem.
    for i, spec, limit in plan.texts:
        v = values[i]
        if v is not None and not (type(v) is str and v.isascii() and "\x00" not in v and len(v) <= limit):
            values[i] = _clean(table, spec, v, serialise_json=True)
    for i, spec, bound in plan.ints:
        v = values[i]
        if v is not None and not (type(v) is int and -bound <= v < bound):
            values[i] = _clean(table, spec, v, serialise_json=True)
    for i, spec in plan.jsons:
        v = values[i]
        if v is not None:
            values[i] = dump_json(v, spec.name)
    for i, proc in plan.procs:
        if values[i] is not None:
            values[i] = proc(values[i])
    return tuple(values)


# Below this many rows in a batch, PostgreSQL gets pipelined INSERTs (all tables in one round
# trip) instead of one COPY per table, each of which costs a round trip of its own.
COPY_MIN_ROWS = 200


def bulk_insert(connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (dicts keyed by column name) in one COPY or one executemany."""
    insert_batches(connection, [(table, rows)])


def insert_batches(connection: Connection, batches: Sequence[tuple[Table, Sequence[Mapping[str, Any]]]]) -> None:
    """Insert rows into several tables, in order, inside the connection's transaction: one
    ``COPY`` per table on PostgreSQL for a large batch, pipelined INSERTs for a small one, one
    ``executemany`` per table on SQLite."""
    dialect = connection.dialect
    planned = [(table, _plan(table, dialect), rows) for table, rows in batches if rows]
    if not planned:
        return
    raw = connection.connection.dbapi_connection
    assert raw is not None  # a connection inside an open transaction is always checked out
    if dialect.name != "postgresql":
        cursor = raw.cursor()
        try:
            for table, plan, rows in planned:
                marks = ", ".join("?" * len(plan.names))
                tuples = [_as_tuple(table, plan, row) for row in rows]
                cursor.executemany(f'INSERT INTO "{table.name}" ({_names(plan)}) VALUES ({marks})', tuples)
        finally:
            cursor.close()
        return
    pg: Any = raw  # psycopg's connection: COPY and pipelines are not in the DB-API
    if sum(len(rows) for _, _, rows in planned) >= COPY_MIN_ROWS:
        # Rows are checked and encoded while COPY streams: the server parses and indexes one chunk
        # while this process builds the next. A row that fails its check raises inside the COPY,
        # which aborts it; the transaction around it then rolls back, so nothing is half-written.
        with pg.cursor() as cursor:
            for table, plan, rows in planned:
                with cursor.copy(f'COPY "{table.name}" ({_names(plan)}) FROM STDIN') as copy:
                    for row in rows:
                        copy.write_row(_as_tuple(table, plan, row))
        return
    prepared = [(table, plan, [_as_tuple(table, plan, row) for row in rows]) for table, plan, rows in planned]
    with pg.pipeline(), pg.cursor() as cursor:
        for table, plan, tuples in prepared:
            jsons = {i for i, _ in plan.jsons}
            marks = ", ".join("%s::jsonb" if i in jsons else "%s" for i in range(len(plan.names)))
            cursor.executemany(f'INSERT INTO "{table.name}" ({_names(plan)}) VALUES ({marks})', tuples)


def _names(plan: _Plan) -> str:
    return ", ".join(f'"{n}"' for n in plan.names)
