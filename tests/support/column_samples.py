"""One column of three rows (a null among them) per kind of column a table may have: what
the tests that sweep column types (the writer's, the operations') draw from."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa

NAN = float("nan")

SAMPLES: dict[pa.DataType, list[Any]] = {
    pa.bool_(): [True, None, False],
    pa.int8(): [-128, None, 127],
    pa.uint64(): [0, None, 2**64 - 1],
    pa.int64(): [-(2**63), None, 7],
    pa.float16(): [1.5, None, -0.0],
    pa.float32(): [1.5, None, float("inf")],
    pa.float64(): [NAN, None, -1e300],
    pa.string(): ["é", None, ""],
    pa.large_string(): ["a" * 40, None, "b"],
    pa.binary(): [b"\x00", None, b""],
    pa.large_binary(): [b"x", None, b"yz"],
    pa.binary(3): [b"abc", None, b"\x00\x01\x02"],
    pa.date32(): [0, None, 20_000],
    pa.date64(): [0, None, 86_400_000 * 3],
    pa.time32("ms"): [0, None, 86_399_999],
    pa.time64("us"): [1, None, 86_399_999_999],
    pa.timestamp("us"): [0, None, 1_700_000_000_000_000],
    pa.timestamp("us", "UTC"): [1, None, 2],
    pa.timestamp("ms", "Europe/Paris"): [0, None, 1_700_000_000_000],
    pa.timestamp("s"): [0, None, 1_700_000_000],
    pa.decimal128(12, 3): [Decimal("1.500"), None, Decimal("-2.250")],
    pa.list_(pa.int32()): [[1, None], None, []],
    pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())]): [{"a": 1, "b": "x"}, None, {"a": None, "b": None}],
    pa.map_(pa.string(), pa.int64()): [[("k", 1)], None, []],
}


def same_rows(got: pa.Table, want: pa.Table) -> bool:
    """Same schema (names, types, nullability) and rows, NaN equal to NaN."""
    def plain(v):
        if isinstance(v, float) and v != v:
            return "NaN"
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v
    rows = lambda t: sorted(map(repr, plain(t.to_pylist())))  # noqa: E731 - in any order
    return got.schema.equals(want.schema) and rows(got) == rows(want)
