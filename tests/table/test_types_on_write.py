"""Types on write (docs/format.md): every Python write path stores a column as the table's type
only when no value changes, refuses anything else with SchemaMismatch and nothing written, and
converts what pyarrow's safe cast converts with ``cast="safe"``.

The property test checks the rule against a model written as what each type can hold (integer
ranges, a float's significand, a decimal's digits, a timestamp's unit), not as the rule's code;
the cases after it are the ones a user met (issue 44), through every write path.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import math
import os
import shutil
import tempfile
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.errors import SchemaMismatch
from lamina.spec.write_types import CHECK, WIDEN, fit

from support.files import table_files

# -- the model --------------------------------------------------------------------------------

INT_RANGES = {
    pa.int8(): (-2**7, 2**7 - 1), pa.int16(): (-2**15, 2**15 - 1), pa.int32(): (-2**31, 2**31 - 1),
    pa.int64(): (-2**63, 2**63 - 1), pa.uint8(): (0, 2**8 - 1), pa.uint32(): (0, 2**32 - 1),
}
SIGNIFICAND_BITS = {pa.float32(): 24, pa.float64(): 53}  # integers up to 2**bits are exact
UNIT_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}

SOURCES = [
    *INT_RANGES, pa.float32(), pa.float64(), pa.decimal128(5, 2), pa.decimal128(10, 2), pa.decimal128(12, 4),
    pa.string(), pa.large_string(), pa.bool_(), pa.date32(), pa.timestamp("s"), pa.timestamp("ms"),
    pa.timestamp("us"), pa.timestamp("ns"), pa.timestamp("us", "UTC"), pa.timestamp("ns", "Europe/Paris"),
    pa.binary(), pa.null(),
]
# (timestamp[ns] is no table type: tables store microseconds)
TARGETS = [t for t in SOURCES if t not in (pa.large_string(), pa.null(), pa.timestamp("ns"), pa.timestamp("ns", "Europe/Paris"))]


def _kind(t: pa.DataType) -> str:
    for kind, test in (("int", pa.types.is_integer), ("float", pa.types.is_floating), ("decimal", pa.types.is_decimal),
                       ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
                       ("timestamp", pa.types.is_timestamp), ("date", pa.types.is_date)):
        if test(t):
            return kind
    return str(t)


def holds_every_value(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value a column of ``source`` can hold, ``target`` holds exactly."""
    s, t = _kind(source), _kind(target)
    if source.equals(target) or pa.types.is_null(source):
        return True
    if s == "int":
        lo, hi = INT_RANGES[source]
        if t == "int":
            return INT_RANGES[target][0] <= lo and hi <= INT_RANGES[target][1]
        if t == "float":
            return max(-lo, hi) <= 2 ** SIGNIFICAND_BITS[target]
        if t == "decimal":
            return max(-lo, hi) < 10 ** (target.precision - target.scale)
        return False
    if s == "float":
        return t == "float" and SIGNIFICAND_BITS[target] >= SIGNIFICAND_BITS[source]
    if s == "decimal":
        return t == "decimal" and target.scale >= source.scale and target.precision - target.scale >= source.precision - source.scale
    if s == "string":
        return t == "string"
    if s == "date":
        return t == "timestamp" and target.tz is None
    if s == "timestamp":
        return t == "timestamp" and (source.tz is None) == (target.tz is None) and (
            UNIT_PER_SECOND[target.unit] >= UNIT_PER_SECOND[source.unit])
    return False


def value_checked(source: pa.DataType, target: pa.DataType, values: list[Any]) -> bool:
    """The pairs stored when each value converts exactly: a finer timestamp unit into a coarser
    one, where every value is whole in the coarser unit."""
    if _kind(source) == _kind(target) == "timestamp" and (source.tz is None) == (target.tz is None):
        step = UNIT_PER_SECOND[source.unit] // UNIT_PER_SECOND[target.unit]
        return all(v is None or v % step == 0 for v in values)
    return False


def expected(v: Any, source: pa.DataType, target: pa.DataType) -> Any:
    """``v`` (as the test gives it: epoch integers for dates and timestamps) as the table holds it,
    compared as the test reads it back (temporal columns as int64)."""
    if v is None:
        return None
    if pa.types.is_timestamp(target):
        per_s = UNIT_PER_SECOND[target.unit]
        if pa.types.is_date(source):
            return v * 86_400 * per_s
        src_per_s = UNIT_PER_SECOND[source.unit]
        return v * (per_s // src_per_s) if per_s >= src_per_s else v // (src_per_s // per_s)
    return v


def values_of(t: pa.DataType) -> st.SearchStrategy:
    """Values a column of ``t`` holds (dates and timestamps as epoch integers), and nulls."""
    if pa.types.is_integer(t):
        lo, hi = INT_RANGES[t]
        base = st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 7, -7 if lo < 0 else 7]))
    elif pa.types.is_floating(t):
        base = st.floats(allow_nan=False, width=32 if t == pa.float32() else 64)
    elif pa.types.is_decimal(t):
        q = decimal.Decimal(1).scaleb(-t.scale)
        base = st.decimals(min_value=-(10 ** (t.precision - t.scale)) + 1, max_value=10 ** (t.precision - t.scale) - 1,
                           places=t.scale, allow_nan=False, allow_infinity=False).map(lambda d: d.quantize(q))
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        base = st.sampled_from(["7", "nan", "true", "2020-01-01", "x", ""])
    elif pa.types.is_boolean(t):
        base = st.booleans()
    elif pa.types.is_date(t):
        base = st.integers(-10**5, 10**5)
    elif pa.types.is_timestamp(t):
        per_s = UNIT_PER_SECOND[t.unit]
        base = st.one_of(st.integers(-10**9, 10**9).map(lambda s: s * per_s),  # whole seconds
                         st.integers(-10**9 * per_s, 10**9 * per_s))
    elif pa.types.is_binary(t):
        base = st.binary(max_size=4)
    else:
        return st.none()
    return st.one_of(st.none(), base)


def column_of(values: list[Any], t: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return pa.array(values, pa.int64() if pa.types.is_timestamp(t) else pa.int32()).cast(t)
    return pa.array(values, t)


def read_back(col: pa.ChunkedArray) -> list[Any]:
    if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
        return col.cast(pa.int64() if pa.types.is_timestamp(col.type) else pa.int32()).to_pylist()
    return col.to_pylist()


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are the same value (NaN is NaN; a bool is no number, though True == 1)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def refused_with_nothing_written(t: lamina.Table, write: Any, *names: str) -> SchemaMismatch:
    before_files, before_version = table_files(t.uri), t.version
    with pytest.raises(SchemaMismatch) as e:
        write()
    for n in names:
        assert n in str(e.value), (n, str(e.value))
    assert lamina.open_table(t.uri).version == before_version
    assert table_files(t.uri) == before_files, "a refused write leaves no file"
    return e.value


# -- the property -----------------------------------------------------------------------------


@st.composite
def writes(draw: Any) -> tuple[pa.DataType, pa.DataType, list[Any], str | None]:
    source, target = draw(st.sampled_from(SOURCES)), draw(st.sampled_from(TARGETS))
    values = draw(st.lists(values_of(source), min_size=1, max_size=5))
    return source, target, values, draw(st.sampled_from([None, None, "safe"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes())
def test_a_write_stores_exactly_what_the_rule_accepts_and_nothing_else(case):
    source, target, values, cast = case
    root = tempfile.mkdtemp(prefix="lamina-types-")
    try:
        t = lamina.create_table(os.path.join(root, "t"), pa.schema([("id", pa.int64()), ("c", target)]))
        data = pa.table({"id": pa.array(range(len(values)), pa.int64()), "c": column_of(values, source)})
        by_rule = holds_every_value(source, target) or value_checked(source, target, values)
        if cast == "safe" and not by_rule:
            # pyarrow's safe cast is the oracle of cast="safe"
            try:
                want = read_back(pa.chunked_array([data.column("c").cast(target, safe=True)]))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                want = None
        else:
            want = [expected(v, source, target) for v in values] if by_rule else None
        if want is None:
            refused_with_nothing_written(t, lambda: t.append(data, cast=cast), "'c'", str(target))
            return
        t.append(data, cast=cast)
        got = read_back(t.scan().to_arrow().sort_by("id").column("c"))
        assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want)), (got, want)
        assert t.schema.field("c").type.equals(target), "a write never changes the column's type"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_the_rule_is_the_model_on_every_pair_of_types(target):
    """Every (data type, table type) pair, without writing: what the one rule (``fit``) stores as
    it is, checks per value, or refuses is what the model says (the property above draws pairs
    and values through real writes)."""
    for source in SOURCES:
        got = fit(source, target)
        if holds_every_value(source, target):
            assert got == WIDEN, (source, target, got)
        elif value_checked(source, target, [0]):
            assert got == CHECK, (source, target, got)
        else:
            assert got is None, (source, target, got)


def test_the_model_agrees_with_pairs_delta_and_iceberg_name():
    """The model itself, on pairs the peers' docs name (so the property tests a sound model)."""
    assert holds_every_value(pa.int8(), pa.int64()) and holds_every_value(pa.float32(), pa.float64())
    assert holds_every_value(pa.int32(), pa.float64()) and not holds_every_value(pa.int64(), pa.float64())
    assert holds_every_value(pa.int32(), pa.decimal128(10, 0)) and not holds_every_value(pa.int64(), pa.decimal128(18, 0))
    assert holds_every_value(pa.decimal128(10, 2), pa.decimal128(12, 4)) and not holds_every_value(pa.decimal128(10, 2), pa.decimal128(11, 4))
    assert holds_every_value(pa.date32(), pa.timestamp("us")) and not holds_every_value(pa.date32(), pa.timestamp("us", "UTC"))
    assert not holds_every_value(pa.string(), pa.int64()) and not holds_every_value(pa.bool_(), pa.float64())
    assert value_checked(pa.timestamp("ns"), pa.timestamp("us"), [1000, None]) and not value_checked(pa.timestamp("ns"), pa.timestamp("us"), [1001])


# -- the cases a user met ---------------------------------------------------------------------

SCHEMA = pa.schema([
    ("id", pa.int64()), ("n", pa.int64()), ("d", pa.float64()), ("s", pa.string()), ("b", pa.bool_()),
    ("ts", pa.timestamp("us")), ("small", pa.int8()),
])
ROW = {"id": 1, "n": 10, "d": 1.5, "s": "a", "b": False, "ts": dt.datetime(2024, 1, 2, 3, 4, 5), "small": 1}

# (column, the value of a wrong type, what cast="safe" stores of it)
WRONG = [
    ("d", "nan", float("nan")),  # df.d.astype(str) of a missing value
    ("n", "7", 7),
    ("s", 42, "42"),
    ("b", "true", True),
    ("b", 1, True),
    ("d", True, 1.0),
    ("ts", 1_700_000_000, dt.datetime(1970, 1, 1, 0, 28, 20)),  # epoch seconds, read by pyarrow as microseconds
]
WRONG_IDS = [f"{c}<-{v!r}" for c, v, _ in WRONG]


@pytest.fixture
def table(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.Table.from_pylist([ROW], schema=SCHEMA))
    return t


def rows_with(column: str, value: Any, id_: int) -> pa.Table:
    """One row of the table's other columns (their types), ``column`` holding ``value`` as
    pyarrow types it."""
    row = pa.Table.from_pylist([dict(ROW, id=id_)], schema=SCHEMA)
    return row.set_column(row.schema.get_field_index(column), column, pa.array([value]))


def _tx(t: lamina.Table, call: Any) -> None:
    with t.transaction() as tx:
        call(tx)


WRITES = {
    "append": lambda t, data, **kw: t.append(data, **kw),
    "overwrite": lambda t, data, **kw: t.overwrite(data, **kw),
    "overwrite where": lambda t, data, **kw: t.overwrite(data, where="id = 2", **kw),
    "merge insert_all": lambda t, data, **kw: t.merge(data, on="id", **kw).when_not_matched_insert_all().execute(),
    "merge update_all": lambda t, data, **kw: t.merge(data.set_column(0, "id", pa.array([1], pa.int64())), on="id", **kw)
    .when_matched_update_all().execute(),
    "transaction append": lambda t, data, **kw: _tx(t, lambda tx: tx.append(data, **kw)),
    "transaction overwrite": lambda t, data, **kw: _tx(t, lambda tx: tx.overwrite(data, **kw)),
    "transaction merge": lambda t, data, **kw: _tx(t, lambda tx: tx.merge(data, on="id", **kw).when_not_matched_insert_all().execute()),
    "pandas append": lambda t, data, **kw: t.append(data.to_pandas(), **kw),
}


@pytest.mark.parametrize("path", list(WRITES))
@pytest.mark.parametrize("column, value, converted", WRONG, ids=WRONG_IDS)
def test_a_value_of_another_type_is_refused_on_every_write_path(table, path, column, value, converted):
    data = rows_with(column, value, 2)
    refused_with_nothing_written(table, lambda: WRITES[path](table, data), repr(column), str(SCHEMA.field(column).type),
                                 "cast='safe'")
    assert table.refresh().to_arrow().to_pylist() == pa.Table.from_pylist([ROW], schema=SCHEMA).to_pylist()


@pytest.mark.parametrize("path", list(WRITES))
@pytest.mark.parametrize("column, value, converted", WRONG, ids=WRONG_IDS)
def test_cast_safe_stores_what_pyarrows_safe_cast_converts(table, path, column, value, converted):
    WRITES[path](table, rows_with(column, value, 2), cast="safe")
    rows = {r["id"]: r for r in table.refresh().to_arrow().to_pylist()}
    got = rows[1 if "update" in path else 2][column]
    assert same(got, converted), got
    assert table.schema.field(column).type.equals(SCHEMA.field(column).type)


@pytest.mark.parametrize("path", ["append", "merge insert_all", "transaction append"])
@pytest.mark.parametrize("column, value", [("n", "x"), ("small", 300), ("n", 1.5), ("b", "maybe")])
def test_cast_safe_refuses_a_value_that_does_not_convert(table, path, column, value):
    refused_with_nothing_written(table, lambda: WRITES[path](table, rows_with(column, value, 2), cast="safe"),
                                 repr(column), "cast='safe' cannot convert")


def test_the_nan_strings_of_a_pandas_column_are_refused_not_stored_as_nan(table):
    df = pd.DataFrame({"id": [2, 3], "d": [2.5, None]})
    df["d"] = df["d"].astype(str)  # "2.5", "nan"
    refused_with_nothing_written(table, lambda: table.append(df), "'d' is string in the data, the table has double")
    table.append(pd.DataFrame({"id": [2, 3], "d": [2.5, None]}))  # the numbers themselves: a missing one is null
    assert table.to_arrow(where="id >= 2").sort_by("id").column("d").to_pylist() == [2.5, None]


@pytest.mark.parametrize("set_, column", [
    ({"n": "'7'"}, "n"), ({"s": 42}, "s"), ({"b": "'true'"}, "b"), ({"b": 1}, "b"), ({"d": True}, "d"),
    ({"ts": 1_700_000_000}, "ts"), ({"small": 300}, "small"),
])
def test_an_update_whose_value_a_column_cannot_store_is_refused_and_changes_nothing(table, set_, column):
    refused_with_nothing_written(table, lambda: table.update("id = 1", set=set_), repr(column))
    refused_with_nothing_written(table, lambda: _tx(table, lambda tx: tx.update("id = 1", set=set_)), repr(column))
    refused_with_nothing_written(
        table, lambda: table.merge(pa.table({"id": pa.array([1], pa.int64())}), on="id").when_matched_update(set=set_).execute(),
        repr(column))


def test_an_update_is_a_sql_assignment_numbers_fit_when_their_values_do(table):
    table.update("id = 1", set={"small": "small + 1", "d": 0, "n": "n * 2"})  # int64 expressions, an int literal
    assert table.to_arrow().select(["small", "d", "n"]).to_pylist() == [{"small": 2, "d": 0.0, "n": 20}]
    refused_with_nothing_written(table, lambda: table.update("id = 1", set={"small": "small + 200"}), "'small'")
    table.update("id = 1", set={"n": "'7'", "b": "'true'"}, cast="safe")
    assert table.to_arrow().select(["n", "b"]).to_pylist() == [{"n": 7, "b": True}]


def test_lossless_widenings_and_pandas_timestamps_are_stored_exactly(table):
    table.append(pa.table({
        "id": pa.array([2], pa.int32()), "n": pa.array([-5], pa.int8()), "d": pa.array([0.5], pa.float32()),
        "s": pa.array(["x"], pa.large_string()), "b": pa.array([True]), "small": pa.array([None], pa.null()),
        "ts": pa.array([1_700_000_000_000_000_000], pa.timestamp("ns")),
    }))
    df = pd.DataFrame({"id": [3], "ts": pd.to_datetime(["2024-05-06 07:08:09.123456"]),
                       "s": pd.Categorical(["cat"])})  # ns; a dictionary-encoded string column
    table.append(df)
    got = {r["id"]: r for r in table.to_arrow().to_pylist()}
    assert (got[2]["n"], got[2]["d"], got[2]["s"], got[2]["small"]) == (-5, 0.5, "x", None)
    assert got[2]["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20)
    assert (got[3]["ts"], got[3]["s"]) == (dt.datetime(2024, 5, 6, 7, 8, 9, 123456), "cat")
    nanos = pd.DataFrame({"id": [4], "ts": [pd.Timestamp("2024-05-06 07:08:09.123456789")]})
    refused_with_nothing_written(table, lambda: table.append(nanos), "'ts'", "would lose data")


def test_a_null_in_a_required_column_is_still_refused(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    refused_with_nothing_written(t, lambda: t.append(pa.table({"id": pa.nulls(1)})), "required")
    refused_with_nothing_written(t, lambda: t.append(pa.table({"id": pa.array([None], pa.int32())})), "required")


def test_struct_and_list_columns_follow_the_rule_field_by_field(tmp_path):
    point = pa.struct([("x", pa.int64()), ("label", pa.string())])
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("p", point), ("xs", pa.list_(pa.float64()))]))
    t.append(pa.table({"p": pa.array([{"label": "a", "x": 1}], pa.struct([("label", pa.string()), ("x", pa.int8())])),
                       "xs": pa.array([[1.5]], pa.large_list(pa.float32()))}))  # by name, widened; a large list
    t.append(pa.table({"p": pa.array([{"x": 2}], pa.struct([("x", pa.int32())]))}))  # a nullable field left out
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["p"]["x"]) == [
        {"p": {"x": 1, "label": "a"}, "xs": [1.5]}, {"p": {"x": 2, "label": None}, "xs": None}]
    refused_with_nothing_written(t, lambda: t.append(pa.table({"p": pa.array([{"x": "1"}], pa.struct([("x", pa.string())]))})), "'p'")
    refused_with_nothing_written(t, lambda: t.append(pa.table({"xs": pa.array([["1.5"]])})), "'xs'")
    refused_with_nothing_written(
        t, lambda: t.append(pa.table({"p": pa.array([{"x": 1, "extra": 2}], pa.struct([("x", pa.int64()), ("extra", pa.int64())]))})),
        "'p'")


# -- schema_mode="merge" ----------------------------------------------------------------------

NARROW = pa.schema([("id", pa.int64()), ("i8", pa.int8()), ("i16", pa.int16()), ("ts", pa.timestamp("us"))])


def pandas_rows() -> pd.DataFrame:
    """What pandas holds for the table's columns (int64, datetime64[ns]) and a new column."""
    return pd.DataFrame({"id": [2], "i8": [5], "i16": [300], "ts": pd.to_datetime(["2024-01-02"]), "note": ["new"]})


def narrow_table(tmp_path, **properties) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / "t"), NARROW, properties=properties or None)
    t.append(pa.Table.from_pylist([{"id": 1, "i8": 1, "i16": 1, "ts": dt.datetime(2024, 1, 1)}], schema=NARROW))
    return t


def test_merge_mode_never_widens_a_column_unasked(tmp_path):
    t = narrow_table(tmp_path)
    e = refused_with_nothing_written(t, lambda: t.append(pandas_rows(), schema_mode="merge"), "'i8' is int64", "'i16' is int64")
    assert "schema.type-widening.enabled" in str(e)
    assert [str(f.type) for f in t.refresh().schema] == ["int64", "int8", "int16", "timestamp[us]"]
    # What the user meant: add the column, store the values in the table's types.
    v = t.append(pandas_rows(), schema_mode="merge", cast="safe").version
    assert [(f.name, str(f.type)) for f in t.refresh().schema] == [
        ("id", "int64"), ("i8", "int8"), ("i16", "int16"), ("ts", "timestamp[us]"), ("note", "string")]
    assert t.metadata.summary["schema-changes"] == "add note string", "the only change is the column added"
    assert t.version == v and sorted(t.to_arrow().column("i16").to_pylist()) == [1, 300]


def test_merge_mode_records_no_change_that_changes_nothing(tmp_path):
    t = narrow_table(tmp_path)
    schema_id = t.metadata.schema.schema_id
    t.append(pandas_rows().drop(columns=["note"]).astype({"i8": "int8", "i16": "int16"}), schema_mode="merge")
    assert t.metadata.schema.schema_id == schema_id, "ns timestamps into a us column are no type change"
    assert t.metadata.operation == "append"


def test_merge_mode_widens_where_the_table_enables_type_widening(tmp_path):
    t = narrow_table(tmp_path, **{"schema.type-widening.enabled": "true"})
    t.append(pandas_rows(), schema_mode="merge")
    assert [(f.name, str(f.type)) for f in t.schema] == [
        ("id", "int64"), ("i8", "int64"), ("i16", "int64"), ("ts", "timestamp[us]"), ("note", "string")]
    assert sorted(t.to_arrow().column("i16").to_pylist()) == [1, 300]
    # only to a type the column may widen to: strings into an int column stay refused
    refused_with_nothing_written(t, lambda: t.append(pd.DataFrame({"id": [3], "i8": ["7"]}), schema_mode="merge"), "'i8'")


# -- create_table from data -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pandas", "arrow table", "record batch"])
def test_create_table_takes_its_schema_from_data_and_says_ns_is_stored_as_us(tmp_path, caplog, kind):
    df = pd.DataFrame({"id": [1, 2], "ts": pd.to_datetime(["2024-01-01", "2024-01-02"]), "name": ["a", "b"]})
    data = {"pandas": df, "arrow table": pa.Table.from_pandas(df, preserve_index=False),
            "record batch": pa.RecordBatch.from_pandas(df, preserve_index=False)}[kind]
    with caplog.at_level(logging.WARNING, logger="lamina"):
        t = lamina.create_table(str(tmp_path / "t"), data)
    assert [(f.name, str(f.type)) for f in t.schema] == [("id", "int64"), ("ts", "timestamp[us]"), ("name", "string")]
    assert t.version == 0 and t.to_arrow().num_rows == 0, "the data gives the schema; its rows are not written"
    warned = [r.getMessage() for r in caplog.records if "timestamp[ns]" in r.getMessage()]
    assert len(warned) == 1 and "'ts'" in warned[0] and "timestamp[us]" in warned[0], warned
    t.append(data)
    assert t.to_arrow().to_pylist() == pa.Table.from_pandas(df, preserve_index=False).to_pylist()


def test_create_table_refuses_what_is_neither_a_schema_nor_data(tmp_path):
    with pytest.raises(SchemaMismatch, match="pyarrow.Schema"):
        lamina.create_table(str(tmp_path / "t"), {"id": [1]})
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*")), "nothing was created"
