"""SQL expressions in every ``where``: what they mean (Spark's semantics), how they fail, what
they prune. DuckDB checks the bulk of the semantics (tests/data/test_differential.py); these
are the places where Lamina means Spark and DuckDB means something else, the errors, and the
pruning a data engineer counts on."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.errors import EvaluationError, InvalidArgument, InvalidPredicate, SchemaMismatch
from lamina.expr import AlwaysFalse, Compare, Predicate, bind, filter_rows, to_arrow_filter, to_sql
from lamina.expr.values import evaluate
from lamina.spec.schema import Schema

D = decimal.Decimal
SCHEMA = pa.schema([
    ("id", pa.int64()), ("i", pa.int32()), ("f", pa.float64()), ("dec", pa.decimal128(5, 2)), ("s", pa.string()),
    ("d", pa.date32()), ("ts", pa.timestamp("us")), ("tz", pa.timestamp("us", "UTC")),
    ("payload", pa.struct([("user", pa.struct([("id", pa.int64()), ("name", pa.string())]))])),
    ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64())),
])
ROWS = pa.table({
    "id": pa.array([0, 1, 2, 3, 4, 5], pa.int64()),
    "i": pa.array([5, -7, 0, None, 2**31 - 1, 3], pa.int32()),
    "f": [2.7, -2.7, 0.0, float("nan"), None, 1e20],
    "dec": pa.array([D("1.00"), D("2.00"), D("-1.25"), None, D("999.99"), D("0.05")], pa.decimal128(5, 2)),
    "s": [" 12 ", "+5", "abc", "a%c", None, "ABC"],
    "d": [dt.date(2024, 1, 31), dt.date(2024, 3, 3), dt.date(2023, 12, 31), None, dt.date(1969, 12, 31), dt.date(2024, 2, 29)],
    "ts": [dt.datetime(2024, 1, 31, 10, 30), dt.datetime(2024, 3, 3), None, dt.datetime(1970, 1, 1), dt.datetime(2024, 2, 29, 23, 59), dt.datetime(2023, 6, 1)],
    "tz": pa.array([dt.datetime(2024, 1, 1, 0, 30), None, dt.datetime(2024, 1, 1), dt.datetime(2023, 12, 31, 23), dt.datetime(2024, 6, 1), dt.datetime(2024, 1, 2)], pa.timestamp("us", "UTC")),
    "payload": [{"user": {"id": 7, "name": "ann"}}, {"user": {"id": 8, "name": None}}, {"user": None}, None, {"user": {"id": 7, "name": "bo"}}, {"user": {"id": 1, "name": "x"}}],
    "tags": [["a", "b"], [], None, ["c"], ["a"], ["x", "y", "z"]],
    "attrs": pa.array([[("k", 1)], [("j", 2)], [], None, [("k", 5), ("j", 1)], [("k", None)]], pa.map_(pa.string(), pa.int64())),
}, schema=SCHEMA)
S = Schema.from_arrow(SCHEMA)


def ids(where: str, rows: pa.Table = ROWS) -> list[int]:
    return sorted(filter_rows(rows, to_arrow_filter(bind(where, S)), where).column("id").to_pylist())


# --- Spark's meaning, where DuckDB's differs -----------------------------------------------------------


@pytest.mark.parametrize("where, want", [
    # integers divide as DOUBLEs; % takes the dividend's sign
    ("i / 2 = 2.5", [0]), ("i % 3 = -1", [1]), ("i DIV 2 = -3", [1]),
    # CAST truncates toward zero (DuckDB rounds), reads strings trimmed and signed
    ("TRY_CAST(f AS INT) = 2", [0]), ("TRY_CAST(f AS INT) = -2", [1]), ("CAST(dec AS INT) = -1", [2]),
    ("TRY_CAST(s AS INT) = 12", [0]), ("TRY_CAST(s AS INT) = 5", [1]), ("TRY_CAST(s AS INT) IS NULL", [2, 3, 4, 5]),
    ("TRY_CAST(f AS INT) IS NULL", [3, 4, 5]), ("TRY_CAST(i AS TINYINT) IS NULL", [3, 4]),
    ("CAST(2.675 AS DECIMAL(4, 2)) = 2.68", [0, 1, 2, 3, 4, 5]),  # half away from zero
    # DECIMAL division is exact, rounded half away from zero at Spark's scale (DuckDB: a DOUBLE):
    # DECIMAL(5, 2) / INT is DECIMAL(16, 13)
    ("dec / 3 = 0.3333333333333", [0]), ("dec / 3 = 0.6666666666667", [1]), ("dec / 3 = -0.4166666666667", [2]),
    # substring: 1-based, 0 is 1, negative from the end; trim removes spaces only
    ("substring(s, 0, 2) = 'ab'", [2]), ("substring(s, -2) = 'bc'", [2]), ("trim(s) = '12'", [0]),
    # LIKE's escape is a backslash unless ESCAPE says otherwise; ILIKE ignores case
    ("s LIKE 'a\\%c'", [3]), ("s LIKE 'a!%c' ESCAPE '!'", [3]), ("s LIKE 'a_c'", [2, 3]), ("s ILIKE 'abc'", [2, 5]),
    ("s NOT LIKE 'a%'", [0, 1, 5]), ("starts_with(s, 'a')", [2, 3]), ("ends_with(s, 'C')", [5]), ("contains(s, '%')", [3]),
    # dates: dayofweek 1 is Sunday; add_months and month INTERVALs clamp to the month's end
    ("dayofweek(d) = 1", [1, 2]), ("add_months(d, 1) = DATE '2024-02-29'", [0]),
    ("d + INTERVAL 1 MONTH = DATE '2024-03-29'", [5]), ("d - INTERVAL '1' YEAR = DATE '2023-02-28'", [5]),
    ("ts + INTERVAL 1 MONTH = TIMESTAMP '2024-02-29 10:30:00'", [0]), ("date_trunc('week', ts) = TIMESTAMP '2024-01-29'", [0]),
    ("datediff(d, DATE '2024-01-01') = 30", [0]), ("date_add(d, 1) = DATE '2024-03-01'", [5]), ("trunc(d, 'MM') = DATE '2024-01-01'", [0]),
    # a zoned timestamp's fields are UTC's
    ("hour(tz) = 0 AND day(tz) = 1", [0, 2, 4]), ("CAST(tz AS DATE) = DATE '2023-12-31'", [3]),
    # nested values: fields, a map's key (NULL if absent), [] from 0, element_at from 1
    ("payload.user.id = 7", [0, 4]), ("payload.user.name IS NULL", [1, 2, 3]), ("attrs['k'] > 1", [4]),
    ("element_at(attrs, 'j') = 2", [1]), ("CASE WHEN size(tags) > 0 THEN tags[0] END = 'a'", [0, 4]), ("try_element_at(tags, 3) = 'z'", [5]), ("size(tags) = 0", [1]),
    # NULLs: IS [NOT] DISTINCT FROM and <=> never give NULL
    ("i IS NOT DISTINCT FROM NULL", [3]), ("i <=> 5", [0]), ("i IS DISTINCT FROM 5", [1, 2, 3, 4, 5]),
    ("coalesce(i, 0) = 0", [2, 3]), ("nullif(i, 5) IS NULL", [0, 3]), ("IF(i > 0, 'p', 'n') = 'n'", [1, 2, 3]),
    # a DECIMAL meets a DOUBLE as the DOUBLE nearest to it (Arrow's cast multiplies: 0.30000000000000004)
    ("round(f / 9, 1) = 0.3", [0]),
    # NaN equals NaN and is above everything
    ("f + 1 > 1e300", [3]), ("f * 0 = f * 0", [0, 1, 2, 3, 5]),
])
def test_spark_semantics(where, want):
    assert ids(where) == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.decimals(min_value=-10**6, max_value=10**6, places=4, allow_nan=False), min_size=1, max_size=20))
def test_a_decimal_cast_to_double_is_the_nearest_double(values):
    rows = pa.table({"x": pa.array(values, pa.decimal128(11, 4))})
    out = evaluate("CAST(x AS DOUBLE)", rows).to_pylist()
    assert out == [float(v) for v in values]  # Python's float(Decimal) is correctly rounded


def test_guarded_branches_never_fail():
    """A branch is evaluated only for the rows that take it: the division by zero behind a
    CASE, an AND or a COALESCE never happens (Arrow computes every argument for every row;
    the rows that do not need one get a NULL instead)."""
    assert ids("CASE WHEN i = 0 THEN FALSE ELSE 10 / i > 1 END") == [0, 5]
    assert ids("i <> 0 AND 10 / i > 1") == [0, 5]
    assert ids("i = 0 OR 10 / i > 1") == [0, 2, 5]
    assert ids("coalesce(i, 10 / (id - 2)) > 4") == [0, 3, 4]  # (id 2 has an i: its division is not needed)
    with pytest.raises(EvaluationError, match="DIVIDE_BY_ZERO"):
        ids("10 / i > 1 AND i <> 0")  # evaluated left to right: the division comes first


@pytest.mark.parametrize("where, error", [
    ("10 / (id - 2) > 1", "DIVIDE_BY_ZERO"),
    ("f / (id - 2) > 1", "DIVIDE_BY_ZERO"),  # a DOUBLE zero too (Spark's ANSI mode; DuckDB gives inf)
    ("i % (id - 2) > 1", "DIVIDE_BY_ZERO"),
    ("i + 1 > 0", "ARITHMETIC_OVERFLOW"),
    ("id * 9223372036854775807 > 1", "ARITHMETIC_OVERFLOW"),
    ("- (i - 2147483647 - 1) > 0", "ARITHMETIC_OVERFLOW"),
    ("CAST(s AS INT) > 0", "CAST"),
    ("CAST(f AS BIGINT) > 0", "CAST"),
    ("CAST(dec AS DECIMAL(3, 1)) > 0", "CAST"),
    ("element_at(tags, 3) = 'z'", "INVALID_ARRAY_INDEX"),
])
def test_row_errors_are_typed_and_change_nothing(tmp_path, where, error):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(ROWS)
    with pytest.raises(EvaluationError, match=error):
        t.scan(where=where).to_arrow()
    with pytest.raises(EvaluationError, match=error):
        t.delete(where)
    with pytest.raises(EvaluationError, match=error):
        t.update(where, set={"s": "'x'"})
    assert lamina.open_table(t.uri).version == t.version == 1
    assert t.scan().to_arrow().column("id").to_pylist() == list(range(6))


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("where, needle", [
    ("nope(id) = 1", "unknown function nope() in nope(id); supported: abs, add_months"),
    ("lower(id) = 'a'", "lower needs a string, not BIGINT"),
    ("id + s > 1", "arithmetic + needs numbers, not STRING"),
    ("s LIKE s", "a LIKE pattern must be a constant"),
    ("s LIKE 'a!b' ESCAPE '!'", "may only precede _, % or itself"),
    ("s LIKE 'ab!' ESCAPE '!'", "ends with its escape character"),
    ("date_trunc('fortnight', ts) = ts", "unknown unit 'FORTNIGHT'"),
    ("CAST(ts AS INT) = 1", "CAST from TIMESTAMP_NTZ to INT is not supported"),
    ("CAST('x' AS INT) = 1", "cannot be cast to INT"),
    ("payload.nope = 1", "no field 'nope' in payload"),
    ("tags.x = 1", "use element_at(x, key) or x[index]"),
    ("other.id = 1", "unknown column 'other.id'"),
    ("id + 1", "a where must be a boolean expression, not BIGINT"),
    ("element_at(tags, 0) = 'a'", "SQL array indices start at 1"),
    ("substring(s, id) = 'a'", "substring's start must be a constant"),
    ("tags = tags", "cannot be compared"),
    ("s > 1.5 + d", "arithmetic + needs numbers, not DATE"),
    ("d - d > 1", "use datediff(end, start)"),
])
def test_bad_input_names_the_part_and_what_is_supported(tmp_path, where, needle):
    with pytest.raises(InvalidPredicate) as e:
        bind(where, S)
    assert needle in str(e.value)
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(ROWS)
    for call in (lambda: t.delete(where), lambda: t.update(where, set={"s": "'x'"}), lambda: t.scan(where=where)):
        with pytest.raises(InvalidPredicate):
            call()
    assert lamina.open_table(t.uri).version == 1


# --- binding: what the leaves become ------------------------------------------------------------------


def test_terms_that_are_a_column_and_literals_become_leaves():
    """Constant parts fold; a column compared with what folds to a literal is a plain leaf
    (pruned and pushed to engines as before), rewritten exactly onto the column's values."""
    assert bind("id > 100 + 1.5", S) == Compare(">=", "id", pa.scalar(102, pa.int64()))
    assert bind("CAST(i AS BIGINT) = 3.5", S) == AlwaysFalse()
    assert bind("d < DATE '2024-01-10' - INTERVAL 9 DAY", S) == Compare("<", "d", pa.scalar(dt.date(2024, 1, 1), pa.date32()))
    assert bind("NOT (id + 1 > 3)", S) == bind("id + 1 <= 3", S)
    assert bind("id + 1 > 3.5", S) == bind("id + 1 >= 4", S)  # exact on the term's values
    assert isinstance(bind("lower(s) IN ('a', 'b')", S), Predicate)
    e = bind("id + 1 > 18 AND (s LIKE 'x%' OR payload.user.id = 7)", S)
    assert bind(e, S) == e  # idempotent
    assert bind(to_sql(e), S) == e  # its SQL reads back as itself


def test_in_over_a_string_function_evaluates_it_once():
    """``lower(s) IN (...)`` is NULL where s is: that validity is s's, so the filter lowers each
    string once (Arrow evaluates an expression's every occurrence), with SQL's NULLs kept under NOT."""
    for where in ("lower(s) IN ('abc', '+5')", "lower(trim(s)) NOT IN ('abc', '12')", "upper(s) IN ('ABC', NULL)"):
        filt = str(to_arrow_filter(bind(where, S)))
        assert all(filt.count(f) == where.count(f"{f}(") for f in ("lower", "upper", "trim")), (where, filt)
    assert ids("lower(s) IN ('abc', '+5')") == [1, 2, 5]
    assert ids("lower(trim(s)) NOT IN ('abc', '12')") == [1, 3]  # the NULL s (4) is in neither
    assert ids("NOT (lower(s) IN ('abc'))") == [0, 1, 3]
    assert ids("upper(s) IN ('ABC', NULL)") == [2, 5]
    assert ids("(lower(s) IN ('abc')) IS NULL") == [4]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | st.text("aZq@. 09éÉİKßΣσ", max_size=6) | st.text("aZq@.", max_size=6), max_size=12),
       st.sampled_from([pa.string(), pa.large_string()]), st.integers(0, 2))
def test_lower_and_upper_are_unicode_case_mapping_on_any_text(values, t, cut):
    """lower / upper take Arrow's ASCII kernel on a batch of ASCII text, Unicode's otherwise: the
    same values either way (sliced arrays too)."""
    rows = pa.table({"s": pa.array(values, t)}).slice(min(cut, len(values)))
    for fn, unicode in (("lower", pc.utf8_lower), ("upper", pc.utf8_upper)):
        got = evaluate(f"{fn}(s)", rows)
        assert pa.chunked_array([got] if isinstance(got, pa.Array) else got).to_pylist() == \
            unicode(rows.column("s")).to_pylist(), fn


def test_current_date_and_timestamp_are_the_statements_clock():
    now = dt.datetime(2024, 3, 1, 0, 30, tzinfo=dt.timezone.utc)
    e = bind("d >= current_date - INTERVAL 90 DAY AND ts < current_timestamp()", S, now=now)
    assert e == bind("d >= DATE '2023-12-02' AND CAST(ts AS TIMESTAMP) < TIMESTAMP '2024-03-01 00:30:00+00:00'", S)
    assert bind("d = current_date", S, now=now) == bind("d = DATE '2024-03-01'", S)


# --- update set values, merge conditions: the same engine -----------------------------------------------


def test_update_values_and_merge_conditions_use_the_same_expressions(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("x", pa.int32()), ("s", pa.string())]))
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "x": pa.array([7, 8, None], pa.int32()), "s": ["ab", "CD", None]}))
    with pytest.raises(SchemaMismatch, match="does not convert exactly"):  # 7 / 2 = 3.5: no INT holds it
        t.update("x % 2 = 1 OR s IS NULL", set={"x": "coalesce(x, 0) / 2"})
    assert t.version == 1
    t.update("x % 2 = 1 OR s IS NULL", set={"x": "CAST(coalesce(x, 0) / 2 AS INT)", "s": "lower(coalesce(s, 'N')) || '!'"})
    assert t.scan().to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "x": 3, "s": "ab!"}, {"id": 2, "x": 8, "s": "CD"}, {"id": 3, "x": 0, "s": "n!"}]  # CAST truncates 3.5 to 3
    src = pa.table({"id": pa.array([2, 3, 4], pa.int64()), "x": pa.array([1, 2, 3], pa.int32()), "s": ["q", "r", "s"]})
    (t.merge(src, on="id")
        .when_matched_update({"x": "CASE WHEN source.x > target.x THEN source.x ELSE target.x + source.x END"},
                             condition="starts_with(source.s, 'q') OR target.x + source.x > 1")
        .when_not_matched_insert_all(condition="source.x * 2 >= 6")
        .execute())
    assert t.scan().to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "x": 3, "s": "ab!"}, {"id": 2, "x": 9, "s": "CD"}, {"id": 3, "x": 2, "s": "n!"}, {"id": 4, "x": 3, "s": "s"}]
    with pytest.raises(InvalidArgument, match="unknown function frob"):
        t.update("id = 1", set={"x": "frob(x)"})


# --- pruning ----------------------------------------------------------------------------------------


def _files(t, where: str) -> int:
    return t.scan(where=where).plan().entries.num_rows


def test_prefix_and_date_predicates_prune_by_bounds(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("ts", pa.timestamp("us"))])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    for k in range(20):
        t.append(pa.table({"id": pa.array(range(k * 10, k * 10 + 10), pa.int64()),
                           "s": [f"k{k:02d}-{i}" for i in range(10)],
                           "ts": [dt.datetime(2024, 1, 1) + dt.timedelta(days=k, hours=i) for i in range(10)]}))
    assert _files(t, "s LIKE 'k07%'") == 1 and _files(t, "starts_with(s, 'k1')") == 10
    assert _files(t, "s LIKE 'k07-_'") == 1 and _files(t, "s LIKE '%7'") == 20  # no prefix: every file
    assert _files(t, "lower(s) LIKE 'k07%'") == 20  # lower() is not monotone
    assert _files(t, "date_trunc('day', ts) = TIMESTAMP '2024-01-05'") == 1
    assert _files(t, "CAST(ts AS DATE) BETWEEN DATE '2024-01-03' AND DATE '2024-01-04'") == 2
    assert _files(t, "day(ts) = 5") == 1 and _files(t, "year(ts) = 2023") == 0
    assert _files(t, "id + 1 > 190") == 1 and _files(t, "id * -2 > -15") == 1 and _files(t, "abs(id - 100) < 5") == 2
    assert _files(t, "CASE WHEN id > 1000 THEN 0 ELSE id END >= 195") == 1
    assert _files(t, "coalesce(id, 0) IN (5, 199)") == 2
    assert _files(t, "id % 10 = 3") == 20  # not monotone
    for where in ("s LIKE 'k07%'", "date_trunc('day', ts) = TIMESTAMP '2024-01-05'", "id * -2 > -15", "abs(id - 100) < 5"):
        assert t.scan(where=where).to_arrow().equals(t.scan().to_arrow().filter(to_arrow_filter(bind(where, t.metadata.schema))))


def test_partition_values_prune_terms_where_files_keep_no_statistics(tmp_path):
    """With no column statistics, a day(ts) partition's values still bound ts: date_trunc,
    year and monotone arithmetic on it prune by them."""
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us"))])
    t = lamina.create_table(str(tmp_path / "t"), schema, partition_by=["day(ts)"],
                            properties={"write.metadata.metrics.default": "none"})
    rows = pa.table({"id": pa.array(range(40), pa.int64()),
                     "ts": [dt.datetime(2023, 12, 25) + dt.timedelta(hours=6 * i) for i in range(40)]})
    t.append(rows)
    assert t.scan().plan().entries.num_rows == 10
    assert _files(t, "ts >= TIMESTAMP '2024-01-01'") == 3  # (as before: a plain leaf, by the partition)
    assert _files(t, "year(ts) = 2024") == 3
    assert _files(t, "date_trunc('month', ts) = TIMESTAMP '2023-12-01'") == 7
    assert _files(t, "ts + INTERVAL 1 DAY < TIMESTAMP '2023-12-27'") == 1
    assert _files(t, "CAST(ts AS DATE) IN (DATE '2023-12-30', DATE '2024-01-02')") == 2
    assert t.scan(where="year(ts) = 2024").to_arrow().column("id").to_pylist() == list(range(28, 40))


def test_change_feed_filters_by_expressions(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("s", pa.string())]))
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["ab", "Ac", "b"]}))
    t.update("id = 2", set={"s": "upper(s) || '!'"})
    t.delete("lower(s) LIKE 'a%' AND id % 2 = 1")
    got = t.changes(0, where="lower(substring(s, 1, 1)) = 'a'").to_arrow()
    assert sorted((r["_commit_version"], r["_change_type"], r["id"], r["s"]) for r in got.to_pylist()) == [
        (1, "insert", 1, "ab"), (1, "insert", 2, "Ac"), (2, "update_postimage", 2, "AC!"), (2, "update_preimage", 2, "Ac"),
        (3, "delete", 1, "ab")]
