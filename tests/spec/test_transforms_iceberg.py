"""Partition transforms against Iceberg's references: pyiceberg's transforms over random
values (hypothesis, edges included), and Iceberg's Java library over a fixed set of vectors
(tests/interop/java/transforms, built by `make interop-java-transforms`).

An Iceberg engine prunes by the partition values Lamina stores: one that differs from what
Iceberg computes for the same value makes it skip live rows.
"""

from __future__ import annotations

import decimal
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg import transforms as it
from pyiceberg import types as ity

from lamina.spec.transforms import apply_transform, transform_result_type

ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = ROOT / "tests" / "interop" / "java" / "transforms"
INT_MAX = 2**31 - 1
_EXACT = decimal.Context(prec=100)


@dataclass(frozen=True)
class Case:
    """A column type as Arrow (Lamina) and Iceberg see it; values are drawn as the Python
    values pyiceberg's transforms take, and turned into an Arrow array of the column."""

    name: str
    arrow: pa.DataType
    iceberg: Any
    values: Callable[[], st.SearchStrategy]
    to_arrow: Callable[[list], pa.Array]
    java: Callable[[Any], str]  # a value as the Java program reads it
    transforms: tuple[str, ...]


def _ints(lo: int, hi: int) -> st.SearchStrategy:
    return st.one_of(st.integers(lo, hi), st.sampled_from([lo, lo + 1, hi, hi - 1, 0, -1 if lo < 0 else 1]))


def _storage(t: pa.DataType, storage: pa.DataType) -> Callable[[list], pa.Array]:
    return lambda xs: pa.array(xs, storage).view(t)


def _decimals(p: int, s: int) -> st.SearchStrategy:
    top = 10**p - 1
    return _ints(-top, top).map(lambda u: decimal.Decimal(u).scaleb(-s, _EXACT))


_TEXT = st.one_of(st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
                  st.sampled_from(["", "é", "😀😀x", "日本語テキスト", "a\u0301b", "\U0010ffff"]))
_BUCKET, _TRUNC, _TIME = ("bucket",), ("truncate",), ("year", "month", "day", "hour")
_I32, _I64 = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)
_US_DAY = 86_400_000_000
# Python's dates and datetimes (years 1 to 9999), which pyiceberg's year and month go through;
# the Java vectors reach further
_DAYS = (-719_162, 2_932_896)
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)


def _num(v: Any) -> str:
    return str(v)


def _hex_text(v: str) -> str:
    return v.encode("utf-8").hex()


CASES = [
    Case("int32", pa.int32(), ity.IntegerType(), lambda: _ints(*_I32), lambda xs: pa.array(xs, pa.int32()), _num, ("identity",) + _BUCKET + _TRUNC),
    Case("int8", pa.int8(), ity.IntegerType(), lambda: _ints(-128, 127), lambda xs: pa.array(xs, pa.int8()), _num, _BUCKET + _TRUNC),
    Case("int16", pa.int16(), ity.IntegerType(), lambda: _ints(-(2**15), 2**15 - 1), lambda xs: pa.array(xs, pa.int16()), _num, _BUCKET + _TRUNC),
    Case("uint16", pa.uint16(), ity.IntegerType(), lambda: _ints(0, 2**16 - 1), lambda xs: pa.array(xs, pa.uint16()), _num, _BUCKET + _TRUNC),
    Case("uint32", pa.uint32(), ity.LongType(), lambda: _ints(0, 2**32 - 1), lambda xs: pa.array(xs, pa.uint32()), _num, _BUCKET + _TRUNC),
    Case("int64", pa.int64(), ity.LongType(), lambda: _ints(*_I64), lambda xs: pa.array(xs, pa.int64()), _num, ("identity",) + _BUCKET + _TRUNC),
    Case("decimal(9,2)", pa.decimal128(9, 2), ity.DecimalType(9, 2), lambda: _decimals(9, 2), lambda xs: pa.array(xs, pa.decimal128(9, 2)), lambda v: format(v, "f"), _BUCKET + _TRUNC),
    Case("decimal(18,0)", pa.decimal128(18, 0), ity.DecimalType(18, 0), lambda: _decimals(18, 0), lambda xs: pa.array(xs, pa.decimal128(18, 0)), lambda v: format(v, "f"), _BUCKET + _TRUNC),
    Case("decimal(38,10)", pa.decimal128(38, 10), ity.DecimalType(38, 10), lambda: _decimals(38, 10), lambda xs: pa.array(xs, pa.decimal128(38, 10)), lambda v: format(v, "f"), _BUCKET + _TRUNC),
    Case("string", pa.string(), ity.StringType(), lambda: _TEXT, lambda xs: pa.array(xs, pa.string()), _hex_text, ("identity",) + _BUCKET + _TRUNC),
    Case("large_string", pa.large_string(), ity.StringType(), lambda: _TEXT, lambda xs: pa.array(xs, pa.large_string()), _hex_text, _BUCKET + _TRUNC),
    Case("binary", pa.binary(), ity.BinaryType(), lambda: st.binary(max_size=12), lambda xs: pa.array(xs, pa.binary()), bytes.hex, _BUCKET + _TRUNC),
    Case("uuid", pa.binary(16), ity.UUIDType(), lambda: st.uuids(), lambda xs: pa.array([None if u is None else u.bytes for u in xs], pa.binary(16)), str, _BUCKET),
    Case("fixed[5]", pa.binary(5), ity.FixedType(5), lambda: st.binary(min_size=5, max_size=5), lambda xs: pa.array(xs, pa.binary(5)), bytes.hex, _BUCKET),
    Case("date", pa.date32(), ity.DateType(), lambda: _ints(*_DAYS), _storage(pa.date32(), pa.int32()), _num, _BUCKET + ("year", "month", "day")),
    Case("time", pa.time64("us"), ity.TimeType(), lambda: _ints(0, _US_DAY - 1), _storage(pa.time64("us"), pa.int64()), _num, _BUCKET),
    Case("timestamp", pa.timestamp("us"), ity.TimestampType(), lambda: _ints(*_MICROS), _storage(pa.timestamp("us"), pa.int64()), _num, _BUCKET + _TIME),
    Case("timestamptz", pa.timestamp("us", "UTC"), ity.TimestamptzType(), lambda: _ints(*_MICROS), _storage(pa.timestamp("us", "UTC"), pa.int64()), _num, _BUCKET + _TIME),
    Case("timestamp_ns", pa.timestamp("ns"), ity.TimestampNanoType(), lambda: _ints(*_I64), _storage(pa.timestamp("ns"), pa.int64()), _num, _BUCKET + _TIME),
    Case("timestamptz_ns", pa.timestamp("ns", "UTC"), ity.TimestamptzNanoType(), lambda: _ints(*_I64), _storage(pa.timestamp("ns", "UTC"), pa.int64()), _num, _BUCKET + _TIME),
]
# Arrow units Iceberg does not have, as the microseconds they are (Iceberg's time and timestamp).
SCALED = [
    (pa.time32("ms"), ity.TimeType(), 1000, (0, 86_400_000 - 1)),
    (pa.timestamp("ms"), ity.TimestampType(), 1000, (-(-_MICROS[0] // 1000), _MICROS[1] // 1000)),
    (pa.timestamp("s", "UTC"), ity.TimestamptzType(), 1_000_000, (-(-_MICROS[0] // 10**6), _MICROS[1] // 10**6)),
]


def _java_type(t: Any) -> pa.DataType | None:
    """The Java int or long an Iceberg integer type is computed in."""
    return {ity.IntegerType(): 32, ity.LongType(): 64}.get(t)


def _wrapped(v: int, bits: int) -> int:
    """``v`` in ``bits``-bit two's complement (Java's int and long arithmetic)."""
    return (v + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def _transform_string(name: str, arg: int | None) -> str:
    return f"{name}[{arg}]" if arg is not None else name


def _pyiceberg(name: str, arg: int | None, t: Any) -> Callable[[Any], Any]:
    return {
        "identity": lambda: it.IdentityTransform(),
        "bucket": lambda: it.BucketTransform(arg),
        "truncate": lambda: it.TruncateTransform(arg),
        "year": lambda: it.YearTransform(),
        "month": lambda: it.MonthTransform(),
        "day": lambda: it.DayTransform(),
        "hour": lambda: it.HourTransform(),
    }[name]().transform(t)


def _lamina(name: str, arg: int | None, case_type: pa.DataType, arrow: pa.Array) -> list[Any]:
    """Lamina's values, as pyiceberg gives them (a day as its day count)."""
    out = apply_transform(_transform_string(name, arg), arrow, case_type)
    assert out.type == transform_result_type(_transform_string(name, arg), case_type)
    return (out.view(pa.int32()) if pa.types.is_date32(out.type) else out).to_pylist()


def _expected(name: str, arg: int | None, case: Case, v: Any) -> Any:
    want = _pyiceberg(name, arg, case.iceberg)(v)
    if name == "truncate" and _java_type(case.iceberg):
        # pyiceberg floors in Python's unbounded ints; Iceberg's Java computes in its int or
        # long, where a floor below the type's minimum wraps around (the Java vectors below
        # check that, and widths whose w + w overflows an int)
        want = _wrapped(want, _java_type(case.iceberg))
    if name == "identity" and isinstance(v, uuid.UUID):
        want = v.bytes
    return want


def _args(name: str, case: Case) -> st.SearchStrategy:
    if name == "bucket":
        return st.one_of(st.integers(1, INT_MAX), st.sampled_from([1, 2, 16, 1000, INT_MAX]))
    if name == "truncate":
        # above 2**30 Java's int arithmetic overflows (w + w): the Java vectors cover those
        hi = 2**30 if case.iceberg == ity.IntegerType() else INT_MAX
        return st.one_of(st.integers(1, hi), st.sampled_from([1, 3, 10, 50, 1000, hi]))
    return st.none()


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_every_transform_equals_pyicebergs(data):
    case = data.draw(st.sampled_from(CASES), "case")
    name = data.draw(st.sampled_from(case.transforms), "transform")
    arg = data.draw(_args(name, case), "arg")
    values = data.draw(st.lists(case.values(), min_size=1, max_size=8), "values")
    got = _lamina(name, arg, case.arrow, case.to_arrow(values + [None]))
    assert got == [_expected(name, arg, case, v) for v in values] + [None]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(SCALED), st.data())
def test_other_arrow_units_transform_as_iceberg_microseconds(scaled, data):
    t, iceberg, per, (lo, hi) = scaled
    name = data.draw(st.sampled_from(("bucket",) + (() if pa.types.is_time(t) else _TIME)))
    arg = data.draw(st.integers(1, INT_MAX)) if name == "bucket" else None
    values = data.draw(st.lists(_ints(lo, hi), min_size=1, max_size=8))
    storage = pa.int32() if t.bit_width == 32 else pa.int64()
    got = _lamina(name, arg, t, pa.array(values, storage).view(t))
    assert got == [_pyiceberg(name, arg, iceberg)(v * per) for v in values]


# --- Iceberg's Java library ----------------------------------------------------------------

_JAVA_ARGS = {
    "bucket": [1, 7, 16, 1000, INT_MAX],
    "truncate": [1, 3, 10, 50, 1000, 2**30, 2**30 + 1, INT_MAX],
}


def _edge_values(case: Case) -> list[Any]:
    """Values at the ends of the type and around zero, as drawn by the case's strategy."""
    if case.iceberg in (ity.IntegerType(), ity.LongType(), ity.DateType(), ity.TimeType()) or "timestamp" in case.name:
        lo, hi = {
            "int32": _I32, "int8": (-128, 127), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
            "uint32": (0, 2**32 - 1), "int64": _I64, "date": (-800_000, 800_000), "time": (0, _US_DAY - 1),
            "timestamp_ns": _I64, "timestamptz_ns": _I64,
        }.get(case.name, (-(2**58), 2**58))
        mid = [0, 1, -1, 9, -9, 10, -10, 49, -49, 1000, -1001, 86_399_999_999, -86_400_000_001, 3_600_000_000]
        return sorted({lo, lo + 1, lo + 9, hi, hi - 1, hi - 9} | {m for m in mid if lo <= m <= hi})
    if pa.types.is_decimal(case.arrow):
        top, s = 10**case.arrow.precision - 1, case.arrow.scale
        return [decimal.Decimal(u).scaleb(-s, _EXACT) for u in (-top, -top + 1, -49, -1, 0, 1, 49, top - 1, top, -(top // 2))]
    if case.iceberg == ity.StringType():
        return ["", "a", "iceberg", "é😀xyz", "日本語テキスト", "a\u0301b", "\U0010ffff\U0010ffff"]
    if case.iceberg == ity.UUIDType():
        return [uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    if isinstance(case.iceberg, ity.FixedType):
        return [b"\x00" * 5, b"\xff" * 5, b"abcde"]
    return [b"", b"\x00", b"\xff\xfe\xfd\xfc", b"iceberg"]


def _vectors() -> list[tuple[Case, str, int | None, Any]]:
    out = []
    for case in CASES:
        for name in case.transforms:
            for arg in _JAVA_ARGS.get(name, [None]):
                for v in _edge_values(case):
                    out.append((case, name, arg, v))
    return out


def _java_text(case: Case, value: Any) -> str:
    """Lamina's value as the Java program prints Iceberg's (days for a day, hex for text)."""
    if value is None:
        return "null"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return value.encode("utf-8").hex()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _java_program() -> list[str]:
    """The command that runs the Java vectors program, built with the project's Makefile."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"Iceberg's Java transforms need a JDK and Maven; {' and '.join(missing)} not on PATH "
                    "(apt-get install openjdk-17-jdk-headless maven)")
    build = subprocess.run(["make", "-s", "interop-java-transforms"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, f"make interop-java-transforms failed:\n{build.stdout}\n{build.stderr}"
    return ["java", "-cp", f"{JAVA_DIR / 'target' / 'classes'}:{JAVA_DIR / 'target' / 'dependency' / '*'}",
            "lamina.interop.Transforms"]


@pytest.mark.slow  # starts a JVM
def test_every_transform_equals_icebergs_java_library():
    """The fixed vectors (every transform, every type, the ends of each type's range and
    awkward widths) through Iceberg's Java library equal Lamina's values, including where
    Java's int and long arithmetic wraps and where pyiceberg's unbounded ints do not."""
    command = _java_program()
    vectors = _vectors()
    lines = [f"{c.iceberg}\t{_transform_string(n, a)}\t{c.java(v)}" for c, n, a, v in vectors]
    run = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    answers = run.stdout.splitlines()
    assert len(answers) == len(vectors)
    wrong = []
    for (case, name, arg, v), line, answer in zip(vectors, lines, answers):
        kind, _, java = answer.partition("\t")
        assert kind != "error", f"Iceberg refused {line!r}: {java}"
        arrow = case.to_arrow([v])
        got = _java_text(case, _lamina(name, arg, case.arrow, arrow)[0])
        if got != java:
            wrong.append(f"{line!r}: Iceberg {java}, Lamina {got}")
    assert not wrong, f"{len(wrong)} of {len(vectors)} vectors differ:\n" + "\n".join(wrong[:30])
    # the two the issue names, among them
    by_line = dict(zip(lines, answers))
    assert by_line["int\ttruncate[10]\t-2147483648"] == "int\t2147483646"
    assert by_line["decimal(9, 2)\ttruncate[50]\t-9999999.99"].endswith("\t-10000000.00")
