"""The view's encodings against pyiceberg's (an independent implementation of the spec):
single-value serialization of bounds, deletion-vector-v1 blobs in Puffin files, and the
schema and defaults as pyiceberg parses them."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from lamina.errors import IcebergUnsupported
from lamina.iceberg import puffin
from lamina.iceberg.types import iceberg_schema
from lamina.iceberg.values import serialize
from lamina.spec import dv
from lamina.spec.schema import Schema

conversions = pytest.importorskip("pyiceberg.conversions", reason="pyiceberg is in the test extra")
from pyiceberg import types as T  # noqa: E402
from pyiceberg.schema import Schema as IcebergSchema  # noqa: E402
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file  # noqa: E402
from pyiceberg.table.puffin import PuffinFile  # noqa: E402

CASES = [
    (pa.bool_(), T.BooleanType(), st.booleans()),
    (pa.int8(), T.IntegerType(), st.integers(-128, 127)),
    (pa.int16(), T.IntegerType(), st.integers(-(2**15), 2**15 - 1)),
    (pa.int32(), T.IntegerType(), st.integers(-(2**31), 2**31 - 1)),
    (pa.uint16(), T.IntegerType(), st.integers(0, 2**16 - 1)),
    (pa.int64(), T.LongType(), st.integers(-(2**63), 2**63 - 1)),
    (pa.float32(), T.FloatType(), st.floats(width=32, allow_nan=False)),
    (pa.float64(), T.DoubleType(), st.floats(allow_nan=False)),
    (pa.string(), T.StringType(), st.text()),
    (pa.binary(), T.BinaryType(), st.binary()),
    (pa.binary(3), T.FixedType(3), st.binary(min_size=3, max_size=3)),
    (pa.date32(), T.DateType(), st.dates()),
    (pa.time64("us"), T.TimeType(), st.times()),
    (pa.timestamp("us"), T.TimestampType(), st.datetimes()),
    (pa.timestamp("ms"), T.TimestampType(), st.datetimes().map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))),
    (pa.timestamp("us", "UTC"), T.TimestamptzType(), st.datetimes(timezones=st.just(dt.timezone.utc))),
    (pa.decimal128(9, 2), T.DecimalType(9, 2), st.decimals("-9999999.99", "9999999.99", places=2, allow_nan=False)),
    (pa.decimal128(38, 10), T.DecimalType(38, 10),
     st.decimals(decimal.Decimal("-" + "9" * 28), decimal.Decimal("9" * 28), places=10, allow_nan=False)),
]


def _iceberg_value(t: pa.DataType, v):
    """What pyiceberg's to_bytes takes for a value of Iceberg type of ``t``."""
    if pa.types.is_date(t):
        return (v - dt.date(1970, 1, 1)).days
    if pa.types.is_timestamp(t):
        epoch = dt.datetime(1970, 1, 1, tzinfo=v.tzinfo)
        return (v - epoch) // dt.timedelta(microseconds=1)
    if pa.types.is_time(t):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return v


@pytest.mark.parametrize("arrow_type,iceberg_type,values", CASES, ids=[str(c[0]) for c in CASES])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_bounds_serialize_as_pyiceberg_does(arrow_type, iceberg_type, values, data):
    v = data.draw(values)
    ours = serialize(v, arrow_type, upper=False)
    theirs = conversions.to_bytes(iceberg_type, _iceberg_value(arrow_type, v))
    if pa.types.is_floating(arrow_type) and v == 0:
        assert conversions.from_bytes(iceberg_type, ours) == 0  # a zero lower bound is -0.0
        assert str(conversions.from_bytes(iceberg_type, ours)) == "-0.0"
        assert str(conversions.from_bytes(iceberg_type, serialize(v, arrow_type, upper=True))) == "0.0"
        return
    assert ours == theirs
    assert conversions.from_bytes(iceberg_type, ours) == conversions.from_bytes(iceberg_type, theirs)


@settings(max_examples=50, deadline=None)
@given(positions=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=200), dense=st.integers(0, 3))
def test_lamina_deletion_vectors_read_back_as_iceberg_ones(positions, dense):
    """A Lamina DV blob converted to deletion-vector-v1 holds the same positions for pyiceberg,
    in a Puffin file whose footer names the data file; runs (dense ranges) too."""
    positions = sorted(set(positions) | set(range(1000, 1000 + dense * 5000)))
    bm = BitMap(positions)
    data, where = dv.encode([bm, BitMap([1, 2, 3])])
    blobs = []
    for i, (offset, length) in enumerate(where):
        blob, card = puffin.dv_blob(data[offset:offset + length], "x.dv", offset)
        blobs.append((f"file:///data/{i}.parquet", blob, card))
    body, placed = puffin.puffin_file(blobs, "test")
    vectors = {v.referenced_data_file: v.to_vector().to_pylist() for v in deletion_vectors_from_puffin_file(PuffinFile(body))}
    assert vectors["file:///data/0.parquet"] == positions
    assert vectors["file:///data/1.parquet"] == [1, 2, 3]
    assert [p.cardinality for p in placed] == [len(positions), 3]
    for p, (_, blob, _) in zip(placed, blobs):
        assert body[p.offset:p.offset + p.length] == blob


def test_schema_with_defaults_nesting_and_docs_parses_in_pyiceberg():
    arrow = pa.schema([
        pa.field("id", pa.int64(), False),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.int32())),
        pa.field("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
        pa.field("price", pa.decimal128(10, 2)),
        pa.field("at", pa.timestamp("us", "UTC")),
    ])
    schema = Schema.from_arrow(arrow)
    j = iceberg_schema(schema, 3)
    parsed = IcebergSchema.model_validate_json(json.dumps(j))
    assert parsed.schema_id == 3
    assert [f.field_id for f in parsed.fields] == [schema.field_id(n) for n in schema.names]
    assert parsed.find_field("tags.element").field_id == 3
    assert isinstance(parsed.find_field("attrs").field_type, T.MapType)
    assert parsed.find_field("price").field_type == T.DecimalType(10, 2)
    assert parsed.find_field("at").field_type == T.TimestamptzType()
    assert parsed.find_field("id").required


@pytest.mark.parametrize("t", [pa.uint32(), pa.uint64(), pa.float16(), pa.time32("ms")])
def test_a_type_iceberg_lacks_is_refused_naming_the_column(t):
    schema = Schema.from_arrow(pa.schema([("ok", pa.int64()), ("bad", t)]))
    with pytest.raises(IcebergUnsupported, match="'bad'"):
        iceberg_schema(schema, 0)
