"""Random SQL expressions, each written twice: as Lamina (Spark SQL) reads it and as DuckDB
must be told to compute the same thing.

Terms over the differential test's columns (tests/data/test_differential.py): arithmetic,
casts, CASE / COALESCE / NULLIF / IF, string functions and LIKE, date and time functions and
INTERVALs, nested fields, compared with each other (column to column too), with literals, by
IN, BETWEEN, IS [NOT] DISTINCT FROM, IS NULL, under AND / OR / NOT.

Where Lamina's semantics (Spark's) and DuckDB's differ, ``DIFFERENCES`` names the difference
and the DuckDB text is written to mean what Lamina means, or the case is not generated; no
difference is left to chance. docs/expressions.md lists the same differences.
"""

from __future__ import annotations

from hypothesis import strategies as st

DIFFERENCES = {
    "float32_meets_wider": "a FLOAT meeting a DOUBLE or DECIMAL is computed as DOUBLE in Spark; DuckDB "
                           "rounds the other side to FLOAT: the DuckDB side casts the FLOAT to DOUBLE",
    "division_by_zero": "x / 0 fails in Lamina (Spark's ANSI DIVIDE_BY_ZERO); DuckDB returns +-inf or NaN: "
                        "divisors are nonzero constants (tests/expr/test_terms.py checks the error)",
    "decimal_division": "DECIMAL / DECIMAL is an exact DECIMAL in Spark, a DOUBLE in DuckDB: not generated "
                        "(tests/expr/test_terms.py checks Spark's rounding)",
    "cast_to_integer": "CAST of a fractional number to an integer truncates toward zero in Spark, rounds in "
                       "DuckDB: the DuckDB side is CAST(trunc(x) AS ...)",
    "substring_start": "substring(s, 0, n) starts at the first character in Spark, before it in DuckDB: "
                       "starts are 1, 2 or negative",
    "like_escape": "LIKE's default escape is a backslash in Spark, none in DuckDB: the DuckDB side says ESCAPE '\\'",
    "array_index": "x[i] counts from 0 in Spark, from 1 in DuckDB; out of range it fails in Spark (ANSI), is "
                   "NULL in DuckDB: try_element_at(x, i) (from 1, NULL out of range) against DuckDB's x[i]",
    "dayofweek": "dayofweek is 1 (Sunday) to 7 in Spark, 0 to 6 in DuckDB: the DuckDB side adds 1",
    "date_plus_interval": "DATE + INTERVAL is a DATE in Spark, a TIMESTAMP in DuckDB: the DuckDB side casts it to DATE",
    "datediff": "datediff(end, start) in Spark is DuckDB's datediff('day', start, end)",
    "concat_null": "concat() with a NULL is NULL in Spark, skips it in DuckDB: the DuckDB side uses ||",
    "int_functions": "date parts, length, datediff and size are INT in Spark, BIGINT in DuckDB (so they overflow "
                     "apart): the DuckDB side casts them to INT",
    "date_trunc_not_equal_null": "DuckDB 1.5.5 answers date_trunc(unit, x) != c as TRUE where x is NULL (a "
                                 "rewrite for a c not on a unit boundary): the DuckDB side truncates only "
                                 "non-NULL values (CASE WHEN x IS NULL ...)",
    "evaluation_errors": "a row that overflows or does not fit a CAST fails in both, but which rows are "
                         "evaluated (and so whether a statement fails) depends on the order each engine "
                         "evaluates AND, OR and CASE in and on pruning: predicates DuckDB fails on are not compared",
}

SMALL = ["1", "2", "3", "-2", "7"]


def _pair(lam: str, duck: str | None = None) -> tuple[str, str]:
    return lam, duck if duck is not None else lam


# (int_functions: DuckDB's date parts, lengths and sizes are BIGINT, Spark's INT)
INT_ATOMS = [("i", "i"), ("k", "k"), ("n", "n"), ("st.x", "st.x"), ("length(s)", "CAST(length(s) AS INT)"),
             ("year(d)", "CAST(year(d) AS INT)"), ("month(ts)", "CAST(month(ts) AS INT)"), ("day(tz)", "CAST(day(tz) AS INT)"),
             ("hour(ts)", "CAST(hour(ts) AS INT)"), ("hour(tz)", "CAST(hour(tz) AS INT)"), ("quarter(d)", "CAST(quarter(d) AS INT)"),
             ("dayofweek(d)", "CAST(dayofweek(d) + 1 AS INT)"), ("dayofyear(ts)", "CAST(dayofyear(ts) AS INT)"),
             ("try_element_at(arr, 1)", "arr[1]"), ("try_element_at(arr, 2)", "arr[2]"), ("element_at(m, 'a')", "m['a']"),
             ("datediff(d, DATE '2000-01-01')", "CAST(datediff('day', DATE '2000-01-01', d) AS INT)"),
             ("size(arr)", "CAST(len(arr) AS INT)")]
FLOAT_ATOMS = [("f", "f"), ("2.5E0", "2.5E0")]
F32_ATOMS = [("g", "g")]
DEC_ATOMS = [("dec", "dec"), ("1.25", "1.25"), ("-0.05", "-0.05")]
STR_ATOMS = [("s", "s"), ("st.y", "st.y"), ("'a'", "'a'"), ("'é'", "'é'")]
DATE_ATOMS = [("d", "d"), ("DATE '2024-02-29'", "DATE '2024-02-29'"), ("DATE '1969-12-31'", "DATE '1969-12-31'"),
              ("CAST(ts AS DATE)", "CAST(ts AS DATE)"), ("CAST(tz AS DATE)", "CAST(tz AS DATE)")]
TS_ATOMS = [("ts", "ts"), ("TIMESTAMP '2024-02-29 23:00:00'", "TIMESTAMP '2024-02-29 23:00:00'")]
TZ_ATOMS = [("tz", "tz")]


@st.composite
def numeric(draw, depth: int = 2) -> tuple[str, str, str]:
    """(lamina, duckdb, kind) of a number: kind int, f32, float or dec."""
    kind = draw(st.sampled_from(["int", "int", "int", "float", "f32", "dec"]))
    atoms = {"int": INT_ATOMS + [(v, v) for v in SMALL], "float": FLOAT_ATOMS, "f32": F32_ATOMS, "dec": DEC_ATOMS}[kind]
    if depth <= 0 or draw(st.integers(0, 2)) == 0:
        lam, duck = draw(st.sampled_from(atoms))
        return lam, duck, kind
    a = draw(numeric(depth - 1))
    shape = draw(st.sampled_from(["+", "-", "*c", "/c", "%c", "neg", "abs", "round", "floor", "cast_double", "cast_int",
                                  "case", "coalesce", "nullif", "if"]))
    if shape in ("+", "-"):
        b = draw(numeric(depth - 1))
        return _arith(shape, a, b)
    if shape == "*c":
        return _arith("*", a, (c := draw(st.sampled_from(SMALL)), c, "int"))
    if shape == "/c":
        if a[2] == "dec":
            return a  # (decimal_division)
        c = draw(st.sampled_from(SMALL))
        return _arith("/", a, (c, c, "int"))
    if shape == "%c":
        c = draw(st.sampled_from(["3", "7", "-2"]))
        return _arith("%", a, (c, c, "int"))
    if shape == "neg":
        return f"(- {a[0]})", f"(- {a[1]})", a[2]
    if shape == "abs":
        return f"abs({a[0]})", f"abs({a[1]})", a[2]
    if shape == "round":
        if a[2] != "dec":
            return a  # rounding a binary fraction: see docs/expressions.md
        return f"round({a[0]}, 1)", f"round({a[1]}, 1)", "dec"
    if shape == "floor":
        fn = draw(st.sampled_from(["floor", "ceil"]))
        if a[2] == "int":
            return a
        if a[2] == "f32":
            return f"{fn}({a[0]})", f"{fn}(CAST({a[1]} AS DOUBLE))", "float"
        return f"{fn}({a[0]})", f"{fn}({a[1]})", "float" if a[2] == "float" else "dec"
    if shape == "cast_double":
        return f"CAST({a[0]} AS DOUBLE)", f"CAST({a[1]} AS DOUBLE)", "float"
    if shape == "cast_int":
        target = draw(st.sampled_from(["INT", "BIGINT"]))
        duck = f"CAST({a[1]} AS {target})" if a[2] == "int" else f"CAST(trunc({a[1]}) AS {target})"
        return f"CAST({a[0]} AS {target})", duck, "int"
    b = draw(numeric(depth - 1))
    lam_a, duck_a, lam_b, duck_b, kind = _common(a, b)
    if shape == "coalesce":
        return f"coalesce({lam_a}, {lam_b})", f"coalesce({duck_a}, {duck_b})", kind
    if shape == "nullif":
        return f"nullif({lam_a}, {lam_b})", f"nullif({duck_a}, {duck_b})", a[2] if kind == a[2] else kind
    cond = draw(predicates(depth - 1))
    if shape == "if":
        return f"IF({cond[0]}, {lam_a}, {lam_b})", f"if({cond[1]}, {duck_a}, {duck_b})", kind
    return f"(CASE WHEN {cond[0]} THEN {lam_a} ELSE {lam_b} END)", f"(CASE WHEN {cond[1]} THEN {duck_a} ELSE {duck_b} END)", kind


def _result_kind(a: str, b: str) -> str:
    if "float" in (a, b) or ("f32" in (a, b) and "dec" in (a, b)):
        return "float"
    if "f32" in (a, b):
        return "f32"
    if "dec" in (a, b):
        return "dec"
    return "int"


def _common(a: tuple, b: tuple) -> tuple[str, str, str, str, str]:
    """The two operands (DuckDB's with a FLOAT cast to DOUBLE where Spark widens it) and the kind."""
    kind = _result_kind(a[2], b[2])
    duck_a, duck_b = a[1], b[1]
    if kind == "float":
        if a[2] == "f32":
            duck_a = f"CAST({duck_a} AS DOUBLE)"
        if b[2] == "f32":
            duck_b = f"CAST({duck_b} AS DOUBLE)"
    return a[0], duck_a, b[0], duck_b, kind


def _arith(op: str, a: tuple, b: tuple) -> tuple[str, str, str]:
    lam_a, duck_a, lam_b, duck_b, kind = _common(a, b)
    if op == "/":
        kind = "float"
        if a[2] == "f32":
            duck_a = f"CAST({duck_a} AS DOUBLE)"
    return f"({lam_a} {op} {lam_b})", f"({duck_a} {op} {duck_b})", kind


LIKE_PATTERNS = ["a%", "%b", "_", "a_", "%é%", "it''s", "a\\%", "", "%", "%z", "B%", "😀%", "%a%"]


@st.composite
def string(draw, depth: int = 2) -> tuple[str, str]:
    if depth <= 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(STR_ATOMS))
    a = draw(string(depth - 1))
    shape = draw(st.sampled_from(["lower", "upper", "trim", "substring", "concat", "case", "coalesce"]))
    if shape in ("lower", "upper", "trim"):
        return f"{shape}({a[0]})", f"{shape}({a[1]})"
    if shape == "substring":
        start = draw(st.sampled_from(["1", "2", "-1", "-2"]))
        length = draw(st.sampled_from(["", ", 1", ", 2", ", 5"]))
        return f"substring({a[0]}, {start}{length})", f"substring({a[1]}, {start}{length})"
    b = draw(string(depth - 1))
    if shape == "concat":
        if draw(st.booleans()):
            return f"({a[0]} || {b[0]})", f"({a[1]} || {b[1]})"
        return f"concat({a[0]}, {b[0]})", f"({a[1]} || {b[1]})"  # (concat_null)
    if shape == "coalesce":
        return f"coalesce({a[0]}, {b[0]})", f"coalesce({a[1]}, {b[1]})"
    cond = draw(predicates(depth - 1))
    return f"(CASE WHEN {cond[0]} THEN {a[0]} ELSE {b[0]} END)", f"(CASE WHEN {cond[1]} THEN {a[1]} ELSE {b[1]} END)"


@st.composite
def temporal(draw, depth: int = 1) -> tuple[str, str, str]:
    """(lamina, duckdb, kind) of a date (``date``), a timestamp (``ts``) or a zoned one (``tz``)."""
    kind = draw(st.sampled_from(["date", "ts", "tz"]))
    if kind == "date":
        a = draw(st.sampled_from(DATE_ATOMS))
        if depth > 0 and draw(st.booleans()):
            shape = draw(st.sampled_from(["add", "interval_day", "interval_month", "trunc"]))
            n = draw(st.sampled_from(["1", "-1", "31", "365"]))
            if shape == "add":
                return f"date_add({a[0]}, {n})", f"({a[1]} + {n})", "date"
            if shape == "interval_day":
                return f"({a[0]} - INTERVAL '{n}' DAY)", f"CAST({a[1]} - INTERVAL '{n}' DAY AS DATE)", "date"
            if shape == "interval_month":
                m = draw(st.sampled_from(["1", "-1", "13"]))
                return f"({a[0]} + INTERVAL '{m}' MONTH)", f"CAST({a[1]} + INTERVAL '{m}' MONTH AS DATE)", "date"
            unit = draw(st.sampled_from(["MM", "YEAR", "QUARTER"]))
            duck_unit = {"MM": "month", "YEAR": "year", "QUARTER": "quarter"}[unit]
            duck = f"CAST(CASE WHEN {a[1]} IS NULL THEN NULL ELSE date_trunc('{duck_unit}', {a[1]}) END AS DATE)"
            return f"trunc({a[0]}, '{unit}')", duck, "date"  # (date_trunc_not_equal_null)
        return a[0], a[1], "date"
    atoms = TS_ATOMS if kind == "ts" else TZ_ATOMS
    a = draw(st.sampled_from(atoms))
    if depth > 0 and draw(st.booleans()):
        shape = draw(st.sampled_from(["trunc", "interval", "interval_month"]))
        if shape == "trunc":
            unit = draw(st.sampled_from(["year", "month", "day", "hour"]))
            duck = f"(CASE WHEN {a[1]} IS NULL THEN NULL ELSE date_trunc('{unit}', {a[1]}) END)"
            return f"date_trunc('{unit}', {a[0]})", duck, kind  # (date_trunc_not_equal_null)
        if shape == "interval":
            n, unit = draw(st.sampled_from([("1", "HOUR"), ("90", "MINUTE"), ("2", "DAY"), ("-1", "SECOND")]))
            return f"({a[0]} + INTERVAL '{n}' {unit})", f"({a[1]} + INTERVAL '{n}' {unit})", kind
        m = draw(st.sampled_from(["1", "-1", "12"]))
        return f"({a[0]} + INTERVAL '{m}' MONTH)", f"({a[1]} + INTERVAL '{m}' MONTH)", kind
    return a[0], a[1], kind


OPS = ["=", "!=", "<", "<=", ">", ">="]


def _numeric_compare(a: tuple, b: tuple, op: str) -> tuple[str, str]:
    lam_a, duck_a, lam_b, duck_b, _ = _common(a, b)
    return f"({lam_a} {op} {lam_b})", f"({duck_a} {op} {duck_b})"


@st.composite
def predicates(draw, depth: int = 2) -> tuple[str, str]:
    """(lamina, duckdb) of a boolean expression."""
    kind = draw(st.sampled_from(["num", "num", "num", "str", "str", "like", "time", "time", "distinct", "null", "in",
                                 "between", "combine", "case"] if depth > 0 else ["num", "str", "like", "time", "null"]))
    d = max(depth - 1, 0)
    if kind == "num":
        a, b = draw(numeric(d + 1)), draw(numeric(d))
        return _numeric_compare(a, b, draw(st.sampled_from(OPS)))
    if kind == "str":
        a, b = draw(string(d + 1)), draw(string(d))
        op = draw(st.sampled_from(OPS))
        return f"({a[0]} {op} {b[0]})", f"({a[1]} {op} {b[1]})"
    if kind == "like":
        a = draw(string(d))
        shape = draw(st.sampled_from(["LIKE", "NOT LIKE", "ILIKE", "NOT ILIKE", "starts_with", "ends_with", "contains"]))
        p = draw(st.sampled_from(LIKE_PATTERNS))
        if shape in ("starts_with", "ends_with", "contains"):
            lit = p.replace("%", "").replace("\\", "").replace("_", "") or "a"
            return f"{shape}({a[0]}, '{lit}')", f"{shape}({a[1]}, '{lit}')"
        return f"({a[0]} {shape} '{p}')", f"({a[1]} {shape} '{p}' ESCAPE '\\')"
    if kind == "time":
        a, b = draw(temporal(1)), draw(temporal(d))
        op = draw(st.sampled_from(OPS))
        return f"({a[0]} {op} {b[0]})", f"({a[1]} {op} {b[1]})"
    if kind == "distinct":
        a, b = draw(numeric(d)), draw(numeric(d))
        lam_a, duck_a, lam_b, duck_b, _ = _common(a, b)
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"({lam_a} IS {neg}DISTINCT FROM {lam_b})", f"({duck_a} IS {neg}DISTINCT FROM {duck_b})"
    if kind == "null":
        a = draw(st.one_of(numeric(d).map(lambda x: x[:2]), string(d), temporal(d).map(lambda x: x[:2])))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"({a[0]} IS {neg}NULL)", f"({a[1]} IS {neg}NULL)"
    if kind == "in":
        if draw(st.booleans()):
            a = draw(string(d))
            items = draw(st.lists(st.sampled_from(STR_ATOMS + [("'b'", "'b'"), ("'ab'", "'ab'")]), min_size=1, max_size=4))
            neg = draw(st.sampled_from(["", "NOT "]))
            return (f"({a[0]} {neg}IN ({', '.join(x[0] for x in items)}))", f"({a[1]} {neg}IN ({', '.join(x[1] for x in items)}))")
        a = draw(numeric(d))
        items = draw(st.lists(numeric(0), min_size=1, max_size=4))
        kinds = [a[2]] + [x[2] for x in items]
        wide = "float" if "float" in kinds or ("f32" in kinds and "dec" in kinds) else None
        cast = (lambda x: f"CAST({x[1]} AS DOUBLE)" if x[2] == "f32" and wide else x[1])
        neg = draw(st.sampled_from(["", "NOT "]))
        return (f"({a[0]} {neg}IN ({', '.join(x[0] for x in items)}))", f"({cast(a)} {neg}IN ({', '.join(cast(x) for x in items)}))")
    if kind == "between":
        a, lo, hi = draw(numeric(d)), draw(numeric(0)), draw(numeric(0))
        kinds = {a[2], lo[2], hi[2]}
        wide = "float" in kinds or ("f32" in kinds and "dec" in kinds)
        cast = (lambda x: f"CAST({x[1]} AS DOUBLE)" if x[2] == "f32" and wide else x[1])
        return f"({a[0]} BETWEEN {lo[0]} AND {hi[0]})", f"({cast(a)} BETWEEN {cast(lo)} AND {cast(hi)})"
    if kind == "case":
        c, p, q = draw(predicates(d)), draw(predicates(d)), draw(predicates(d))
        return f"(CASE WHEN {c[0]} THEN {p[0]} ELSE {q[0]} END)", f"(CASE WHEN {c[1]} THEN {p[1]} ELSE {q[1]} END)"
    word = draw(st.sampled_from(["AND", "OR", "NOT"]))
    a = draw(predicates(d))
    if word == "NOT":
        return f"(NOT {a[0]})", f"(NOT {a[1]})"
    b = draw(predicates(d))
    return f"({a[0]} {word} {b[0]})", f"({a[1]} {word} {b[1]})"
