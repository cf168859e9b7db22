"""Pieces of lamina.spark that need no Spark session: pushed-filter mapping, partition balancing,
type mapping, write planning, the data source's where option. (The Spark tests are in test_spark.py;
idempotent appends, which Spark's writes rely on, in operations/test_append.py.)"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import datasource as sds
from pyspark.sql import types as T

import lamina
from lamina.errors import SchemaMismatch
from lamina.expr import AlwaysFalse, to_arrow_filter
from lamina.spark._filters import from_spark_filter
from lamina.spark._types import arrow_schema, check_writable, safe_cast, spark_schema
from lamina.spark.datasource_options import storage_options
from lamina.spark.datasource_reader import balanced_bins
from lamina.spec.schema import Schema

SCHEMA = Schema.from_arrow(
    pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.string()), ("ts", pa.timestamp("us", "UTC")),
               ("n", pa.timestamp("us")), ("d", pa.date32())])
)
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, None, 5, 6, 7], pa.int64()),
        "x": pa.array([1.0, float("nan"), None, -2.5, 7.0, -0.0, float("inf")]),
        "s": pa.array(["a", "b", None, "B", "a", "c", "d"]),
        "ts": pa.array([0, 86_400_000_000, None, -1, 5, 6, 7], pa.timestamp("us", "UTC")),
        "n": pa.array([0, 86_400_000_000, None, -1, 5, 6, 7], pa.timestamp("us")),
        "d": pa.array([0, 1, None, -1, 2, 3, 4], pa.int32()).cast(pa.date32()),
    }
)


def _spark_truth(f) -> list[bool]:
    """What Spark's SQL semantics select for filter ``f`` over ROWS: NULL -> not selected, NaN is
    equal to itself and larger than every number."""

    def key(v):
        return (1, 0.0) if isinstance(v, float) and math.isnan(v) else (0, v)

    def cmp(op, a, b):
        if a is None or b is None:
            return None
        if isinstance(a, float) or isinstance(b, float):
            a, b = key(a), key(b)
        return {"=": a == b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op]

    def ev(f, row):
        if isinstance(f, sds.Not):
            r = ev(f.child, row)
            return None if r is None else not r
        v = row[f.attribute[0].lower()]
        if isinstance(v, dt.datetime) and v.tzinfo is None and f.attribute[0] == "ts":
            v = v.replace(tzinfo=dt.timezone.utc)
        ops = {sds.EqualTo: "=", sds.GreaterThan: ">", sds.GreaterThanOrEqual: ">=", sds.LessThan: "<", sds.LessThanOrEqual: "<="}
        if type(f) in ops:
            return cmp(ops[type(f)], v, f.value)
        if isinstance(f, sds.EqualNullSafe):
            return (v is None and f.value is None) or (v is not None and f.value is not None and bool(cmp("=", v, f.value)))
        if isinstance(f, sds.In):
            hits = [cmp("=", v, x) for x in f.value]
            return True if any(h is True for h in hits) else (None if v is None or any(h is None for h in hits) else False)
        if isinstance(f, sds.IsNull):
            return v is None
        if isinstance(f, sds.IsNotNull):
            return v is not None
        patterns = {sds.StringStartsWith: str.startswith, sds.StringEndsWith: str.endswith, sds.StringContains: str.__contains__}
        if type(f) in patterns:
            return None if v is None else patterns[type(f)](v, f.value)
        raise AssertionError(f)

    return [ev(f, row) is True for row in ROWS.to_pylist()]


UTC = dt.timezone.utc
FILTERS = [
    sds.EqualTo(("id",), 3), sds.GreaterThan(("id",), 2), sds.Not(sds.EqualTo(("id",), 3)),
    sds.Not(sds.LessThan(("id",), 3)), sds.In(("id",), (1, 5, None)), sds.Not(sds.In(("id",), (1, None))),
    sds.Not(sds.In(("id",), (1, 2))), sds.EqualNullSafe(("id",), None), sds.Not(sds.EqualNullSafe(("id",), 3)),
    sds.EqualTo(("x",), 1.0), sds.LessThan(("x",), 5.0), sds.GreaterThan(("x",), 0.0), sds.GreaterThanOrEqual(("x",), -3.0),
    sds.Not(sds.LessThan(("x",), 0.0)), sds.Not(sds.EqualTo(("x",), 1.0)), sds.EqualTo(("x",), float("nan")),
    sds.In(("x",), (7.0, -2.5)), sds.IsNull(("x",)), sds.IsNotNull(("x",)),
    # NaN as Spark has it: equal to itself, above every number (+inf too); -0.0 equal to 0.0
    sds.GreaterThan(("x",), 1e308), sds.LessThan(("x",), float("nan")), sds.LessThanOrEqual(("x",), float("nan")),
    sds.GreaterThanOrEqual(("x",), float("nan")), sds.GreaterThan(("x",), float("nan")), sds.Not(sds.EqualTo(("x",), float("nan"))),
    sds.In(("x",), (float("nan"), 0.0)), sds.Not(sds.In(("x",), (float("nan"), 1.0))), sds.Not(sds.In(("x",), (0.0, 1.0))),
    sds.EqualTo(("x",), 0.0), sds.LessThan(("x",), 0.0), sds.EqualNullSafe(("x",), float("nan")),
    sds.Not(sds.GreaterThanOrEqual(("x",), float("inf"))),
    sds.EqualTo(("S",), "a"), sds.LessThan(("s",), "b"), sds.StringStartsWith(("s",), "a"), sds.StringEndsWith(("s",), "B"),
    sds.StringContains(("s",), ""), sds.Not(sds.StringStartsWith(("s",), "a")),
    sds.GreaterThanOrEqual(("ts",), dt.datetime(1970, 1, 1, tzinfo=UTC)), sds.LessThan(("ts",), dt.datetime(1970, 1, 2, tzinfo=UTC)),
    sds.LessThan(("n",), dt.datetime(1970, 1, 1, 0, 0, 0, 6)), sds.EqualTo(("d",), dt.date(1970, 1, 2)),
    sds.GreaterThan(("nested", "field"), 1),
]


@pytest.mark.parametrize("f", FILTERS, ids=repr)
def test_pushed_filter_is_taken_only_when_exact(f):
    """A filter Lamina accepts selects exactly the rows Spark would; others are left to Spark."""
    e = from_spark_filter(f, SCHEMA)
    if e is None:
        return
    got = ROWS.filter(to_arrow_filter(e)) if not isinstance(e, AlwaysFalse) else ROWS.slice(0, 0)
    want = ROWS.filter(pa.array(_spark_truth(f)))
    assert got.to_pylist() == want.to_pylist() or (
        str(got.to_pylist()) == str(want.to_pylist())  # NaN != NaN in list comparison
    ), f


def test_float_filters_are_taken_since_lamina_orders_nan_as_spark():
    """Lamina's NaN semantics are Spark's, so float orderings and NaN literals are pushed
    (test_pushed_filter_is_taken_only_when_exact checks their rows); what Lamina cannot
    evaluate exactly still is not."""
    for f in (sds.GreaterThan(("x",), 0.0), sds.GreaterThanOrEqual(("x",), 0.0), sds.Not(sds.LessThan(("x",), 0.0)),
              sds.EqualTo(("x",), float("nan")), sds.In(("x",), (float("nan"),))):
        assert from_spark_filter(f, SCHEMA) is not None, f
    for f in (sds.Not(sds.In(("id",), (1, None))), sds.Not(sds.EqualNullSafe(("x",), 1.0))):
        assert from_spark_filter(f, SCHEMA) is None, f
    assert from_spark_filter(sds.StringStartsWith(("s",), "a"), SCHEMA) is not None  # a Lamina expression (issue 50)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**9), max_size=200), st.integers(1, 16))
def test_balanced_bins_cover_every_file_within_one_file_of_even(sizes, k):
    sizes = np.array(sizes, dtype=np.int64)
    bins = balanced_bins(sizes, k)
    assert len(bins) == len(sizes)
    if not len(sizes):
        return
    used = min(k, len(sizes))
    assert set(bins.tolist()) == set(range(used))
    loads = np.bincount(bins, weights=sizes, minlength=used)
    assert loads.max() - loads.min() <= sizes.max()


def test_type_mapping_round_trips_and_refuses_what_spark_cannot_hold():
    arrow = pa.schema([("a", pa.int8()), ("b", pa.decimal128(20, 3)), ("c", pa.list_(pa.string())),
                       ("d", pa.struct([("x", pa.timestamp("us"))])), ("e", pa.map_(pa.string(), pa.float32())),
                       ("f", pa.binary()), ("g", pa.date32()), ("h", pa.timestamp("us", "UTC"))])
    back = arrow_schema(spark_schema(arrow))
    assert [f.type for f in back] == [f.type for f in arrow]
    with pytest.raises(SchemaMismatch, match="38 digits"):
        spark_schema(pa.schema([("z", pa.decimal256(60, 2))]))
    with pytest.raises(SchemaMismatch, match="Spark cannot read"):
        spark_schema(pa.schema([("z", pa.float16())]))
    assert spark_schema(pa.schema([("u", pa.uint32())])).fields[0].dataType == T.LongType()


def test_safe_casts_only_widen():
    assert safe_cast(T.IntegerType(), T.LongType()) and safe_cast(T.FloatType(), T.DoubleType())
    assert safe_cast(T.DecimalType(10, 2), T.DecimalType(12, 3)) and safe_cast(T.IntegerType(), T.DecimalType(12, 2))
    assert not safe_cast(T.LongType(), T.IntegerType()) and not safe_cast(T.DoubleType(), T.FloatType())
    assert not safe_cast(T.DecimalType(10, 2), T.DecimalType(10, 3)) and not safe_cast(T.StringType(), T.LongType())
    assert not safe_cast(T.TimestampType(), T.TimestampNTZType()) and not safe_cast(T.LongType(), T.DoubleType())


def test_write_plan_names_every_problem():
    table = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string()), ("ts", pa.timestamp("us", "UTC"))])
    df = T.StructType([T.StructField("name", T.LongType()), T.StructField("extra", T.StringType()), T.StructField("TS", T.TimestampType())])
    with pytest.raises(SchemaMismatch) as e:
        check_writable(df, Schema.from_arrow(table), "t")
    msg = str(e.value)
    assert "extra column 'extra'" in msg and "required column 'id' is missing" in msg
    assert "column 'name' is bigint" in msg and "'TS' differs in case" in msg and "nothing was written" in msg
    ok = T.StructType([T.StructField("id", T.IntegerType()), T.StructField("ts", T.TimestampType())])
    assert check_writable(ok, Schema.from_arrow(table), "t") == [("id", T.IntegerType(), T.LongType()), ("name", None, T.StringType()),
                                              ("ts", T.TimestampType(), T.TimestampType())]


def test_storage_options_from_data_source_options():
    opts = {"path": "s3://b/t", "endpoint": "http://x", "s3.region": "eu", "ACCESS_KEY_ID": "k", "versionasof": "3"}
    assert storage_options(opts) == {"endpoint": "http://x", "region": "eu", "access_key_id": "k"}


def test_where_option_reads_back_as_the_same_predicate_or_is_left_out(tmp_path):
    """``read()`` on an object store restricts the data source by its predicate as text; the text
    must bind back to exactly that predicate, else it is not passed (Spark alone filters)."""
    from lamina.expr import bind, col
    from lamina.spark.read import where_option

    t = lamina.create_table(str(tmp_path / "t"), SCHEMA.arrow)
    for where in ["id >= 2 AND s IN ('a', 'it''s')", "ts < TIMESTAMP '1970-01-02 00:00:00'",
                  "n >= TIMESTAMP '1970-01-01 00:00:00.000005' OR d = DATE '1970-01-02'", "NOT (x <= 1.5) OR id IS NULL"]:
        scan = t.scan(where=where)
        text = where_option(scan)
        assert text is not None and bind(text, scan.schema) == scan.predicate, where
    assert where_option(t.scan()) is None
    for e in (col("x") < float("inf"), col("x") >= float("-inf")):  # (their literals read back as typed casts)
        scan = t.scan(where=e)
        assert bind(where_option(scan), scan.schema) == scan.predicate
    scan = t.scan(where="id + 1 > 3 AND lower(s) LIKE 'a%'")
    assert bind(where_option(scan), scan.schema) == scan.predicate


def test_streaming_batches_commit_and_abort_through_writers_made_anew(tmp_path):
    """As Spark runs a streaming query: each micro-batch's tasks run the writer planned for that
    batch, its commit or abort runs on a writer made anew (another write id), given the tasks'
    messages, None for a task it has no message of. The commit takes the tasks' write over
    (their marker goes); the abort removes the batch's files, reported or not, and nothing of
    the batches committed before it."""
    from lamina.spark.datasource_writer import LaminaStreamWriter

    uri = str(tmp_path / "t")
    lamina.create_table(uri, pa.schema([("id", pa.int64())]))
    options = {"path": uri, "appid": "q1"}
    schema = T.StructType([T.StructField("id", T.LongType())])

    def task(writer, lo: int, hi: int):
        return writer.write(iter([pa.record_batch([pa.array(range(lo, hi), pa.int64())], names=["id"])]))

    def on_disk() -> set[str]:
        return {str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t" / "data").rglob("*") if p.is_file()}

    def markers() -> list:
        return list((tmp_path / "t" / "_lamina" / "writes").iterdir())

    batch0 = LaminaStreamWriter(options, schema, False)
    done = [task(batch0, 0, 5), task(batch0, 5, 10)]
    assert len(markers()) == 1
    LaminaStreamWriter(options, schema, False).commit(done, 0)
    assert markers() == []
    committed = on_disk()
    batch1 = LaminaStreamWriter(options, schema, False)
    finished = task(batch1, 10, 15)
    task(batch1, 15, 20)  # finished too, but Spark lost its message
    LaminaStreamWriter(options, schema, False).abort([finished, None], 1)
    assert on_disk() == committed and markers() == []
    t = lamina.open_table(uri)
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(10))
    assert t.metadata.app_transactions == {"q1": 0}
