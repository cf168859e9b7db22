"""Hidden partitioning: Iceberg transforms, spec parsing, paths and predicate projection."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.errors import CorruptMetadata, InvalidPartitionSpec
from lamina.spec.partition import PartitionField, PartitionSpec, parse_partition_by
from lamina.spec.transforms import apply_transform, murmur3_long, project_inclusive, transform_result_type
from lamina.spec.schema import Schema

MAX = 2**31 - 1


@pytest.fixture
def schema() -> Schema:
    return Schema.from_arrow(
        pa.schema(
            [
                ("id", pa.int64()),
                ("small", pa.int32()),
                ("name", pa.string()),
                ("category", pa.string()),
                ("ts", pa.timestamp("us")),
                ("tstz", pa.timestamp("us", "UTC")),
                ("d", pa.date32()),
                ("f", pa.float64()),
                ("tags", pa.list_(pa.string())),
            ]
        )
    )


# --- bucket -------------------------------------------------------------------------------


def _bucket(values, t, n=MAX):
    return apply_transform(f"bucket[{n}]", pa.array(values, type=t)).to_pylist()


@pytest.mark.parametrize(
    "value,t,murmur",
    [  # Iceberg spec, Appendix B
        (34, pa.int32(), 2017239379),
        (34, pa.int64(), 2017239379),
        (dt.date(2017, 11, 16), pa.date32(), -653330422),
        (dt.time(22, 31, 8), pa.time64("us"), -662762989),
        (dt.datetime(2017, 11, 16, 22, 31, 8), pa.timestamp("us"), -2047944441),
        (dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(dt.timedelta(hours=-8))), pa.timestamp("us", "UTC"), -2047944441),
        ("iceberg", pa.string(), 1210000089),
        (b"\x00\x01\x02\x03", pa.binary(), -188683207),
        (decimal.Decimal("14.20"), pa.decimal128(9, 2), -500754589),
    ],
)
def test_bucket_matches_iceberg_spec(value, t, murmur):
    for n in (MAX, 16, 1):
        assert _bucket([value, None], t, n) == [(murmur & MAX) % n, None]


def test_bucket_timestamp_units_agree():
    ts = dt.datetime(2017, 11, 16, 22, 31, 8)
    for unit in ("s", "ms", "us", "ns"):
        assert _bucket([ts], pa.timestamp(unit)) == [-2047944441 & MAX]


def test_vectorized_murmur_matches_mmh3():
    rng = np.random.default_rng(42)
    v = np.concatenate(
        [rng.integers(-(2**63), 2**63 - 1, 5000, dtype=np.int64), np.array([0, -1, 1, 2**63 - 1, -(2**63)], dtype=np.int64)]
    )
    expected = np.array([mmh3.hash(struct.pack("<q", int(x))) for x in v], dtype=np.int32)
    assert np.array_equal(murmur3_long(v), expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=30), st.integers(1, 1000))
def test_bucket_int_property(values, n):
    got = _bucket(values, pa.int32(), n)
    want = [None if v is None else (mmh3.hash(struct.pack("<q", v)) & MAX) % n for v in values]
    assert got == want


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=8)), max_size=20))
def test_bucket_string_property(values):
    want = [None if v is None else (mmh3.hash(v.encode("utf-8")) & MAX) % 7 for v in values]
    assert _bucket(values, pa.string(), 7) == want


# --- temporal, truncate ---------------------------------------------------------------------


def test_temporal_transforms_known_values():
    ts = pa.array(
        [dt.datetime(2017, 12, 1, 10, 12, 55, 38194), dt.datetime(1970, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59), None],
        pa.timestamp("us"),
    )
    assert apply_transform("year", ts).to_pylist() == [47, 0, -1, None]
    assert apply_transform("month", ts).to_pylist() == [575, 0, -1, None]
    assert apply_transform("day", ts).to_pylist() == [dt.date(2017, 12, 1), dt.date(1970, 1, 1), dt.date(1969, 12, 31), None]
    assert apply_transform("hour", ts).to_pylist() == [420034, 0, -1, None]
    assert apply_transform("day", ts).type == pa.date32()
    assert apply_transform("hour", ts).type == pa.int32()

    d = pa.array([dt.date(2017, 11, 16), dt.date(1969, 1, 1), dt.date(1968, 12, 31), None], pa.date32())
    assert apply_transform("year", d).to_pylist() == [47, -1, -2, None]
    assert apply_transform("month", d).to_pylist() == [574, -12, -13, None]
    assert apply_transform("day", d).to_pylist() == d.to_pylist()


def test_temporal_uses_utc_for_tz_aware_and_any_unit():
    # 23:30 at -05:00 is 04:30 UTC the next day.
    local = dt.datetime(2024, 1, 2, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    for unit in ("s", "ms", "us", "ns"):
        a = pa.array([local], pa.timestamp(unit, "America/New_York"))
        assert apply_transform("day", a).to_pylist() == [dt.date(2024, 1, 3)]
        assert apply_transform("hour", a).to_pylist() == [(19725 * 24) + 4]


def test_truncate():
    assert apply_transform("truncate[10]", pa.array([1, -1, 0, 9, 10, -10, -11, None])).to_pylist() == [
        0, -10, 0, 0, 10, -10, -20, None,
    ]
    a = pa.array([-1, 127], pa.int8())
    out = apply_transform("truncate[10]", a)
    assert out.type == pa.int32() and out.to_pylist() == [-10, 120]  # Iceberg's int
    assert apply_transform("truncate[3]", pa.array(["iceberg", "ab", "", None, "é😀xyz"])).to_pylist() == [
        "ice", "ab", "", None, "é😀x",
    ]
    assert apply_transform("truncate[2]", pa.array([b"abc", None])).to_pylist() == [b"ab", None]
    dec = pa.array([decimal.Decimal("10.65"), decimal.Decimal("-0.05")], pa.decimal128(9, 2))
    assert apply_transform("truncate[50]", dec).to_pylist() == [decimal.Decimal("10.50"), decimal.Decimal("-0.50")]


def test_identity_and_result_types():
    a = pa.chunked_array([[1, 2], [None]])
    assert apply_transform("identity", a).to_pylist() == [1, 2, None]
    assert transform_result_type("truncate[4]", pa.string()) == pa.string()
    assert transform_result_type("bucket[4]", pa.string()) == pa.int32()
    assert transform_result_type("year", pa.date32()) == pa.int32()
    for bad, t in [("hour", pa.date32()), ("day", pa.string()), ("bucket[4]", pa.float64()), ("truncate[2]", pa.bool_()),
                   ("identity", pa.list_(pa.int32())), ("bucket[0]", pa.int32()), ("nope", pa.int32())]:
        with pytest.raises(InvalidPartitionSpec):
            transform_result_type(bad, t)


# --- spec parsing -----------------------------------------------------------------------------


def test_parse_partition_by(schema):
    spec = parse_partition_by(["category", "day(ts)", "bucket(16, id)", "truncate(4, name)", "month(d)", "year(tstz)", "hour(ts)"], schema)
    assert [(f.name, f.transform) for f in spec.fields] == [
        ("category", "identity"),
        ("ts_day", "day"),
        ("id_bucket_16", "bucket[16]"),
        ("name_trunc_4", "truncate[4]"),
        ("d_month", "month"),
        ("tstz_year", "year"),
        ("ts_hour", "hour"),
    ]
    assert [f.field_id for f in spec.fields] == list(range(1000, 1007))
    assert spec.fields[2].source_id == schema.field_id("id")
    # one string, several entries; case-insensitive transform names and Spark's plural aliases
    assert parse_partition_by("DAYS(ts), bucket( 8 , `id` )", schema).fields == (
        PartitionField(schema.field_id("ts"), 1000, "ts_day", "day"),
        PartitionField(schema.field_id("id"), 1001, "id_bucket_8", "bucket[8]"),
    )
    assert parse_partition_by(None, schema).is_unpartitioned
    assert parse_partition_by([], schema).is_unpartitioned
    assert not spec.is_unpartitioned


@pytest.mark.parametrize(
    "entry,needle",
    [
        ("nope", "unknown column 'nope'"),
        ("day(nope)", "columns are ['id'"),
        ("frobnicate(id)", "unknown partition transform 'frobnicate'"),
        ("day(name)", "day applies to date and timestamp"),
        ("hour(d)", "hour applies to timestamp"),
        ("bucket(id, 16)", "positive integer"),
        ("bucket(0, id)", "positive integer"),
        ("truncate(-1, name)", "positive integer"),
        ("bucket(16)", "bucket takes (N, column)"),
        ("bucket(4, f)", "bucket applies to"),
        ("tags", "primitive"),
        ("", "empty"),
    ],
)
def test_parse_partition_by_errors(schema, entry, needle):
    with pytest.raises(InvalidPartitionSpec) as e:
        parse_partition_by([entry], schema)
    assert needle in str(e.value)


def test_parse_partition_by_duplicates(schema):
    with pytest.raises(InvalidPartitionSpec, match="duplicate"):
        parse_partition_by(["day(ts)", "days(ts)"], schema)
    with pytest.raises(InvalidPartitionSpec, match="duplicate"):
        parse_partition_by("category, category", schema)


def test_spec_json_round_trip(schema):
    spec = parse_partition_by(["category", "bucket(16, id)"], schema, spec_id=3)
    assert PartitionSpec.from_json(spec.to_json()) == spec
    for bad in [None, [], {"fields": [{"source_id": 1}]}, {"fields": [{"source_id": 1, "field_id": 1000, "name": "x", "transform": "nope"}]},
                {"fields": "x"}, {"spec_id": "a", "fields": []}]:
        with pytest.raises(CorruptMetadata):
            PartitionSpec.from_json(bad)


def test_compute_and_partition_type(schema):
    spec = parse_partition_by(["category", "day(ts)", "bucket(16, id)", "truncate(2, name)"], schema)
    data = pa.table(
        {
            "id": pa.array([34, None], pa.int64()),
            "name": ["iceberg", None],
            "category": ["a/b", None],
            "ts": pa.array([dt.datetime(2024, 1, 3, 5), None], pa.timestamp("us")),
        }
    )
    ptype = spec.partition_type(schema)
    assert ptype.names == ["category", "ts_day", "id_bucket_16", "name_trunc_2"]
    assert [f.type for f in ptype] == [pa.string(), pa.date32(), pa.int32(), pa.string()]
    out = spec.compute(data, schema)
    assert out.schema == ptype
    rows = out.to_pylist()
    assert rows[0] == {"category": "a/b", "ts_day": dt.date(2024, 1, 3), "id_bucket_16": (2017239379 & MAX) % 16, "name_trunc_2": "ic"}
    assert rows[1] == {"category": None, "ts_day": None, "id_bucket_16": None, "name_trunc_2": None}
    assert spec.path_for(rows[0]) == f"category=a%2Fb/ts_day=2024-01-03/id_bucket_16={(2017239379 & MAX) % 16}/name_trunc_2=ic"
    assert spec.path_for(rows[1]) == "category=__NULL__/ts_day=__NULL__/id_bucket_16=__NULL__/name_trunc_2=__NULL__"


# --- paths --------------------------------------------------------------------------------------


HOSTILE = ["../x", "..", ".", "a/b", "/etc/passwd", "\n", "a\x00b", "\\..\\", "c:d", "%2F", "__NULL__", "", " ", "ü", "x" * 5000]


def test_path_escaping_hostile_values(schema):
    spec = parse_partition_by(["category"], schema)
    paths = {}
    for v in HOSTILE + [None]:
        p = spec.path_for({"category": v})
        assert "/" not in p and "\\" not in p
        assert p not in (".", "..") and p.startswith("category=")
        assert all(32 < ord(ch) < 127 for ch in p), p
        assert len(p) < 200
        paths[p] = v
    assert len(paths) == len(HOSTILE) + 1  # distinct values, distinct directories (null included)
    assert spec.path_for({"category": "c/3"}) == "category=c%2F3"
    assert spec.path_for({"category": None}) == "category=__NULL__"


def test_path_escapes_field_names_too():
    s = Schema.from_arrow(pa.schema([("../a/b", pa.string())]))
    spec = parse_partition_by(['"../a/b"'], s)
    p = spec.path_for({"../a/b": "v"})
    assert p == "..%2Fa%2Fb=v" and "/" not in p


def test_path_formats_values(schema):
    spec = parse_partition_by(["day(ts)", "bucket(4, id)"], schema)
    assert spec.path_for({"ts_day": dt.date(2024, 1, 3), "id_bucket_4": 2}) == "ts_day=2024-01-03/id_bucket_4=2"
    with pytest.raises(InvalidPartitionSpec):
        spec.path_for({"ts_day": dt.date(2024, 1, 3)})


# --- projection ----------------------------------------------------------------------------------


def _holds(op, x, v):
    return {"=": x == v, "!=": x != v, "<": x < v, "<=": x <= v, ">": x > v, ">=": x >= v}[op]


_FIELDS = [
    ("identity", pa.int64()),
    ("truncate[10]", pa.int64()),
    ("bucket[8]", pa.int64()),
    ("truncate[2]", pa.string()),
    ("bucket[8]", pa.string()),
    ("day", pa.timestamp("us")),
    ("hour", pa.timestamp("us")),
    ("month", pa.date32()),
    ("year", pa.timestamp("ms")),
]


def _value(t):
    if pa.types.is_integer(t):
        return st.integers(-100, 100)
    if pa.types.is_string(t):
        return st.text(alphabet="abé😀", max_size=4)
    if pa.types.is_date(t):
        return st.dates(dt.date(1968, 1, 1), dt.date(1972, 12, 31))
    return st.datetimes(dt.datetime(1969, 12, 1), dt.datetime(1970, 2, 1))


@st.composite
def _projection_case(draw):
    transform, t = draw(st.sampled_from(_FIELDS))
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in", "not_in"]))
    xs = draw(st.lists(_value(t), min_size=1, max_size=10))
    v = draw(st.lists(_value(t), min_size=1, max_size=3)) if op in ("in", "not_in") else draw(_value(t))
    return transform, t, op, xs, v


@settings(max_examples=200, deadline=None)
@given(_projection_case())
def test_project_inclusive_is_inclusive(case):
    """Whenever `x op v` holds, the projected predicate holds for t(x)."""
    transform, t, op, xs, v = case
    field = PartitionField(1, 1000, "p", transform)
    proj = project_inclusive(field, op, v, t)
    if proj is None:
        return
    pop, pv = proj
    tx = apply_transform(transform, pa.array(xs, type=t)).to_pylist()
    for x, px in zip(xs, tx):
        holds = x in v if op == "in" else x not in v if op == "not_in" else _holds(op, x, v)
        if not holds:
            continue
        if pop == "in":
            assert px in [s.as_py() for s in pv]
        elif pop == "not_in":
            assert px not in [s.as_py() for s in pv]
        else:
            assert _holds(pop, px, pv.as_py()), (x, px, pop, pv)


def test_project_inclusive_rules():
    trunc = PartitionField(1, 1000, "p", "truncate[4]")
    assert project_inclusive(trunc, "<", "abcdef", pa.string()) == ("<=", pa.scalar("abcd"))
    assert project_inclusive(trunc, ">", "abcdef", pa.string()) == (">=", pa.scalar("abcd"))
    assert project_inclusive(trunc, "!=", "abcdef", pa.string()) is None
    assert project_inclusive(trunc, "not_in", ["abcdef"], pa.string()) is None
    bucket = PartitionField(1, 1000, "p", "bucket[16]")
    assert project_inclusive(bucket, "<", 34, pa.int64()) is None
    assert project_inclusive(bucket, "=", 34, pa.int64()) == ("=", pa.scalar((2017239379 & MAX) % 16, pa.int32()))
    ident = PartitionField(1, 1000, "p", "identity")
    assert project_inclusive(ident, "!=", 3, pa.int64()) == ("!=", pa.scalar(3))
    day = PartitionField(1, 1000, "p", "day")
    op, v = project_inclusive(day, "in", [dt.datetime(2024, 1, 1, 1), dt.datetime(2024, 1, 1, 2)], pa.timestamp("us"))
    assert op == "in" and [s.as_py() for s in v] == [dt.date(2024, 1, 1)]


# --- decimals and the edges of a type's range ------------------------------------------------------


def _java_to_byte_array(n: int) -> bytes:
    """Java's BigInteger.toByteArray, by its definition: the fewest bytes holding n in
    two's complement, big-endian (a model independent of Lamina's arithmetic)."""
    size = 1
    while not -(1 << (8 * size - 1)) <= n < (1 << (8 * size - 1)):
        size += 1
    return n.to_bytes(size, "big", signed=True)


def test_bucket_of_negative_decimals_matches_iceberg():
    # Iceberg's reference: bucket[17] of -1.28 in decimal(9,2) (unscaled -128, the one byte 0x80)
    assert _bucket([decimal.Decimal("-1.28")], pa.decimal128(9, 2), 17) == [12]
    assert _java_to_byte_array(-128) == b"\x80" and _java_to_byte_array(128) == b"\x00\x80"


_EXACT = decimal.Context(prec=100)  # Python's default 28 digits would round decimal(38) values


def _digits(precision: int):
    """Unscaled values of a decimal(precision): anywhere, and at powers of two (where Python's
    bit_length and Java's bitLength part ways for negatives)."""
    top = 10**precision - 1
    powers = st.integers(0, top.bit_length() - 1).flatmap(lambda b: st.sampled_from([-(1 << b), (1 << b) - 1, 1 << b]))
    return st.one_of(st.integers(-top, top), powers.filter(lambda v: -top <= v <= top))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([9, 18, 38]).flatmap(lambda p: st.tuples(st.just(p), _digits(p))), st.integers(0, 6), st.integers(1, 1000))
def test_bucket_decimal_hashes_minimal_twos_complement_bytes(case, scale, n):
    precision, unscaled = case
    t = pa.decimal128(precision, scale)
    v = decimal.Decimal(unscaled).scaleb(-scale, _EXACT)
    want = (mmh3.hash(_java_to_byte_array(unscaled)) & MAX) % n
    assert _bucket([v, None], t, n) == [want, None]


def test_truncate_below_a_types_range_is_icebergs_value_in_a_wider_type():
    """-9999999.99 by 50 is -10000000.00 in Iceberg, which needs decimal(10, 2); int32's
    minimum by 10 wraps around to a large positive in Iceberg's Java int arithmetic, and an
    int8 is truncated as the Iceberg int it is. Lamina stores those values (the result type
    widened where they need it), not others (tests/spec/test_transforms_iceberg.py checks
    them against Iceberg's Java library)."""
    dec = pa.array([decimal.Decimal("-9999999.99"), decimal.Decimal("-9999999.50"), decimal.Decimal("-9999999.49"), None],
                   pa.decimal128(9, 2))
    out = apply_transform("truncate[50]", dec)
    assert out.type == pa.decimal128(10, 2) == transform_result_type("truncate[50]", pa.decimal128(9, 2))
    assert out.to_pylist() == [decimal.Decimal("-10000000.00"), decimal.Decimal("-9999999.50"), decimal.Decimal("-9999999.50"), None]
    assert transform_result_type("truncate[1]", pa.decimal128(9, 2)) == pa.decimal128(9, 2)
    assert transform_result_type("truncate[50]", pa.decimal128(38, 2)) == pa.decimal256(39, 2)
    ints = pa.array([-(2**31), -(2**31) + 8, -(2**31) + 9, 2**31 - 1], pa.int32())
    assert apply_transform("truncate[10]", ints).to_pylist() == [2**31 - 2, -(2**31) + 8, -(2**31) + 8, 2**31 - 8]
    assert apply_transform("truncate[1000]", pa.array([-128, -5, 127], pa.int8())).to_pylist() == [-1000, -1000, 0]
    longs = pa.array([-(2**63), 2**63 - 1], pa.int64())
    assert apply_transform("truncate[1000]", longs).to_pylist() == [2**63 - 192, 2**63 - 1 - 807]
    with pytest.raises(InvalidPartitionSpec, match="at most 2147483647"):
        transform_result_type("truncate[2147483648]", pa.int64())


_TRUNCATABLE = [(pa.int8(), -(2**7), 2**7 - 1), (pa.int32(), -(2**31), 2**31 - 1), (pa.int64(), -(2**63), 2**63 - 1)]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_TRUNCATABLE + [(pa.decimal128(5, 2), -99999, 99999), (pa.decimal128(38, 2), -(10**38 - 1), 10**38 - 1)]),
       st.one_of(st.integers(1, 2**31 - 1), st.sampled_from([1, 3, 10, 16, 1000, 2**30, 2**30 + 1, 2**31 - 1])),
       st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in"]), st.data())
def test_truncate_projection_keeps_every_row_that_matches(case, w, op, data):
    """Iceberg's truncation is not monotonic at the edges (a wrapped int is a large positive
    below small ones; a decimal floors below its type): a predicate projected onto the
    partition value never excludes a value that matches it, there or anywhere else."""
    t, lo, hi = case
    edge = st.sampled_from([lo, lo + 1, lo + 9, hi, hi - 1, 0, -1, 5])
    xs = data.draw(st.lists(st.one_of(st.integers(lo, hi), edge), min_size=1, max_size=10))
    literal = data.draw(st.one_of(st.integers(lo, hi), edge))
    as_value = (lambda u: decimal.Decimal(u).scaleb(-t.scale, _EXACT)) if pa.types.is_decimal(t) else (lambda u: u)
    field = PartitionField(1, 1000, "p", f"truncate[{w}]")
    arg = [as_value(literal)] if op == "in" else as_value(literal)
    proj = project_inclusive(field, op, arg, t)
    if proj is None:
        return
    parts = apply_transform(field.transform, pa.array([as_value(x) for x in xs], t)).to_pylist()
    pop, pv = proj
    pv = [v.as_py() for v in pv] if pop == "in" else pv.as_py()
    test = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "in": lambda a, b: a in b}
    for x, p in zip(xs, parts):
        if test[op](x, literal if op != "in" else [literal]):
            assert test[pop](p, pv), f"{x} {op} {literal} holds, but its partition {p} fails {pop} {pv}"


def test_truncate_partitions_keep_the_rows_at_a_types_minimum(tmp_path):
    """End to end: rows at the bottom of the range are written (no error) with Iceberg's
    partition values (wrapped; more digits) and found by every predicate."""
    import lamina

    schema = pa.schema([("i", pa.int32()), ("dec", pa.decimal128(9, 2))])
    # no column statistics: only the partition values prune
    t = lamina.create_table(str(tmp_path / "t"), schema, partition_by=["truncate(10, i)", "truncate(50, dec)"],
                            properties={"write.metadata.metrics.default": "none"})
    t.append(pa.table({"i": pa.array([-(2**31), 5, 2**31 - 1], pa.int32()),
                       "dec": pa.array([decimal.Decimal("-9999999.99"), decimal.Decimal("1"), decimal.Decimal("2")], pa.decimal128(9, 2))}))
    paths = sorted(t.scan().plan().paths)
    assert any("i_trunc_10=2147483646/dec_trunc_50=-10000000.00" in p for p in paths), paths
    for where, want in [("i < 0", [-(2**31)]), ("i <= -2147483648", [-(2**31)]), ("i = -2147483648", [-(2**31)]),
                        ("i IN (-2147483648, 7)", [-(2**31)]), ("i > 2147483640", [2**31 - 1]), ("i >= 0", [5, 2**31 - 1]),
                        ("dec < -9999999", [-(2**31)]), ("dec = -9999999.99", [-(2**31)]), ("dec > 1.5", [2**31 - 1])]:
        assert sorted(t.scan(where=where).to_arrow()["i"].to_pylist()) == want, where
