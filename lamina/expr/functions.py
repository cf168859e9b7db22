"""Every operator and function a term may call: how it is typed, and how Arrow computes it.

One ``Function`` per name (``FUNCTIONS``): ``bind`` types a call whose arguments are bound
(the result type, the casts its arguments need, what must be constant), ``arrow`` builds its
Arrow compute expression from its arguments' expressions, ``raises`` says whether it can fail
on a row (Spark's ANSI errors: overflow, division by zero, a cast that does not fit, an index
out of range), and ``monotone`` how its result moves with each argument (for pruning, see
``lamina.expr.bounds``). The semantics are Spark SQL's; where Arrow's kernels differ, the
expression built here makes them agree, and docs/expressions.md lists what still differs.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidPredicate
from lamina.expr import sqltypes as T
from lamina.expr.terms import INTERVAL_TYPE, Call, Interval, Literal, Term, term_sql

Expr: TypeAlias = pc.Expression
_BOOL = pa.bool_()


@dataclass(frozen=True)
class Function:
    name: str
    bind: Callable[[Call], Term]
    arrow: Callable[..., Expr]
    raises: Callable[[Call], bool] = lambda c: False
    # Per argument: +1 the result never decreases when it grows, -1 never increases, 0 neither
    # (or a callable of the bound call giving that tuple); None: no such argument-wise order.
    monotone: Any = None
    summary: str = ""
    # Whether the value is NULL exactly where its (one) argument is: its validity is the
    # argument's, found without evaluating the call (see ``lamina.expr.compile``).
    strict: bool = False
    # Whether ``arrow`` takes the validity of the first argument (``valid=``): a kernel that
    # says FALSE for a NULL input (``is_in``) gets its SQL NULL from it.
    takes_validity: bool = False


FUNCTIONS: dict[str, Function] = {}


def _register(
    name: str,
    bind: Callable,
    arrow: Callable,
    *,
    raises: Callable | bool = False,
    monotone: Any = None,
    summary: str = "",
    aliases: tuple[str, ...] = (),
    strict: bool = False,
    takes_validity: bool = False,
) -> None:
    r = raises if callable(raises) else (lambda c, v=raises: v)
    f = Function(name, bind, arrow, r, monotone, summary, strict, takes_validity)
    for n in (name, *aliases):
        FUNCTIONS[n] = f


def fail(call: Call | None, message: str) -> NoReturn:
    where = f" in {term_sql(call)}" if call is not None else ""
    raise InvalidPredicate(f"{message}{where}")


# --- building blocks ----------------------------------------------------------------------------


def _cast(x: Expr, t: pa.DataType, safe: bool = True) -> Expr:
    """``CAST`` as an expression (``pc.cast`` takes arrays only)."""
    return x.cast(t, safe=safe)


def fill(x: Expr, value: bool) -> Expr:
    """``x`` with nulls as ``value`` (``pc.fill_null`` takes arrays only)."""
    return pc.coalesce(x, pc.scalar(value))


def null_scalar(t: pa.DataType) -> Expr:
    return pc.scalar(pa.scalar(None, t))


def const(value: Any, t: pa.DataType) -> Expr:
    return pc.scalar(pa.scalar(value, t))


def typed(term: Term, t: pa.DataType) -> Term:
    """``term`` as type ``t``: itself, a folded literal, or a ``cast`` call."""
    if term.type is not None and term.type.equals(t):
        return term
    if isinstance(term, Literal):
        from lamina.expr.typer import fold_cast

        return fold_cast(term, t, strict=True)
    return Call("cast", (term,), (t,), t)


def literal_value(term: Term, call: Call, what: str) -> Any:
    """The Python value of a constant argument; InvalidPredicate naming ``what`` otherwise."""
    if not isinstance(term, Literal):
        fail(call, f"{what} must be a constant")
    v = term.value
    return v.as_py() if isinstance(v, pa.Scalar) else v


def int_constant(term: Term, call: Call, what: str) -> int:
    v = literal_value(term, call, what)
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, decimal.Decimal) and v == v.to_integral_value():
            return int(v)
        fail(call, f"{what} must be an integer constant, not {v!r}")
    return v


def _need(call: Call, i: int, ok: Callable[[pa.DataType], bool], what: str) -> None:
    t = call.args[i].type
    if not (ok(t) or T.is_null(t)):
        fail(call, f"{call.fn} needs {what}, not {T.describe(t)}")


def _nan(e: Expr) -> Expr:
    return pc.is_nan(e)


def is_nan_literal(term: Term) -> bool:
    return (
        isinstance(term, Literal)
        and isinstance(term.value, pa.Scalar)
        and term.value.is_valid
        and T.is_float(term.value.type)
        and math.isnan(term.value.as_py())
    )


# --- comparisons --------------------------------------------------------------------------------

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
NEGATED = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
FLIPPED = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
_KERNEL = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}


def _bind_compare(call: Call) -> Term:
    a, b = call.args
    for x in (a, b):
        if not T.is_ordered(x.type):
            fail(call, f"{T.describe(x.type)} values cannot be compared (only IS [NOT] NULL applies to them)")
    t = _comparable(T.common_type(a.type, b.type, term_sql(call)))
    return Call(call.fn, (typed(a, t), typed(b, t)), call.opts, _BOOL)


def _comparable(t: pa.DataType) -> pa.DataType:
    """NULLs compared with NULLs as INTs (Arrow has no comparison of its null type)."""
    return pa.int32() if T.is_null(t) else t


def compare(op: str, a: Expr, b: Expr, a_term: Term, b_term: Term) -> Expr:
    """``a op b`` with Spark's order: NaN equal to NaN and above every other value, -0.0
    equal to 0.0, null when a side is null (Arrow's kernels follow IEEE 754 on NaN)."""
    out = getattr(pc, _KERNEL[op])(a, b)
    if not T.is_float(a_term.type):
        return out
    for x, _xt, _y, yt, o in ((a, a_term, b, b_term, op), (b, b_term, a, a_term, FLIPPED[op])):
        if isinstance(yt, Literal):  # y constant: NaN rules need only x
            if is_nan_literal(yt):
                n = _nan(x)
                return {"=": n, "!=": ~n, "<": ~n, "<=": n | ~n, ">": n & ~n, ">=": n}[o]
            return out | _nan(x) if o in (">", ">=") else out
    an, bn = _nan(a), _nan(b)
    on_nan = {"=": an & bn, "!=": pc.xor(an, bn), "<": pc.and_not(bn, an), "<=": bn, ">": pc.and_not(an, bn), ">=": an}[
        op
    ]
    return pc.if_else((an | bn) & out.is_valid(), on_nan, out)  # (False where a side is null: out is null there)


def _arrow_compare(call: Call, args: list) -> Expr:
    return compare(call.fn, args[0], args[1], call.args[0], call.args[1])


for _op in COMPARISONS:
    _register(_op, _bind_compare, _arrow_compare, summary="comparison")


def _bind_distinct(call: Call) -> Term:
    bound = _bind_compare(Call("=", call.args))
    assert isinstance(bound, Call)
    return Call(call.fn, bound.args, (), _BOOL)


def _arrow_distinct(call: Call, args: list) -> Expr:
    a, b = args
    eq = compare("=", a, b, call.args[0], call.args[1])
    an, bn = a.is_null(), b.is_null()
    same = pc.if_else(an | bn, an & bn, eq)
    return same if call.fn == "not_distinct" else ~same


_register("not_distinct", _bind_distinct, _arrow_distinct, summary="IS NOT DISTINCT FROM, <=>")
_register("distinct", _bind_distinct, _arrow_distinct, summary="IS DISTINCT FROM")


def _bind_in(call: Call) -> Term:
    subject, *values = call.args
    if not T.is_ordered(subject.type):
        fail(call, f"{T.describe(subject.type)} values cannot be compared")
    t = subject.type
    for v in values:
        t = T.common_type(t, v.type, term_sql(call))
    t = _comparable(t)
    return Call(call.fn, tuple(typed(x, t) for x in call.args), (), _BOOL)


def value_set(values: list[pa.Scalar], t: pa.DataType) -> tuple[pa.Array, bool]:
    """Distinct values for ``is_in`` (both zeros for a float zero: ``is_in`` hashes -0.0 apart
    from 0.0), and whether NaN was among them (``is_in`` finds no NaN)."""
    out, has_nan = [], False
    for v in values:
        x = v.as_py()
        if isinstance(x, float) and math.isnan(x):
            has_nan = True
            continue
        out.append(x)
        if isinstance(x, float) and x == 0.0:
            out += [0.0, -0.0]
    return pa.array(out, type=t), has_nan


def _arrow_in(call: Call, args: list, valid: Expr | None = None) -> Expr:
    """``valid``: where the subject is not NULL (by default ``is_valid`` of the subject, which
    Arrow then computes a second time: a ``lower(s)`` lowers every string twice)."""
    subject, *rest = args
    sterm, values = call.args[0], call.args[1:]
    constants = [v.value for v in values if isinstance(v, Literal) and v.value.is_valid]
    has_null = any(isinstance(v, Literal) and not v.value.is_valid for v in values)
    others = [(e, v) for e, v in zip(rest, values) if not isinstance(v, Literal)]
    parts = []
    if constants:
        vs, has_nan = value_set(constants, sterm.type)
        hit = subject.isin(vs) if len(vs) else pc.scalar(False)
        if has_nan:
            hit = hit | _nan(subject)
        parts.append(pc.if_else(subject.is_valid() if valid is None else valid, hit, null_scalar(_BOOL)))
    for e, v in others:
        parts.append(compare("=", subject, e, sterm, v))
    out = parts[0] if parts else pc.scalar(False)
    for p in parts[1:]:
        out = out | p  # or_kleene: TRUE wins over null
    if has_null:
        out = pc.if_else(fill(out, False), pc.scalar(True), null_scalar(_BOOL))
    if call.fn == "not_in":
        out = ~out
    return out


_register("in", _bind_in, _arrow_in, summary="x IN (...)", takes_validity=True)
_register("not_in", _bind_in, _arrow_in, summary="x NOT IN (...)", takes_validity=True)


# --- logic ---------------------------------------------------------------------------------------


def _bind_logic(call: Call) -> Term:
    for i in range(len(call.args)):
        _need(call, i, pa.types.is_boolean, "a boolean")
    return Call(call.fn, tuple(typed(a, _BOOL) for a in call.args), (), _BOOL)


_LOGIC = {
    "and": lambda a: a[0] & a[1],
    "or": lambda a: a[0] | a[1],
    "not": lambda a: ~a[0],
    "is_true": lambda a: fill(a[0], False),
    "is_not_true": lambda a: ~fill(a[0], False),
    "is_false": lambda a: fill(~a[0], False),
    "is_not_false": lambda a: fill(a[0], True),
}
for _name, _fn in _LOGIC.items():
    _register(_name, _bind_logic, lambda c, a, f=_fn: f(a), summary="boolean logic")


def _bind_null_test(call: Call) -> Term:
    return Call(call.fn, call.args, (), _BOOL)


_register("is_null", _bind_null_test, lambda c, a: a[0].is_null(), summary="IS NULL")
_register("is_not_null", _bind_null_test, lambda c, a: a[0].is_valid(), summary="IS NOT NULL")


# --- arithmetic ------------------------------------------------------------------------------------


def _arith_type(call: Call) -> pa.DataType:
    a, b = call.args
    op = call.fn
    for x in (a, b):
        if not (T.is_numeric(x.type) or T.is_null(x.type)):
            fail(call, f"arithmetic {op} needs numbers, not {T.describe(x.type)} (cast it first)")
    ta = b.type if T.is_null(a.type) else a.type
    tb = a.type if T.is_null(b.type) else b.type
    if T.is_null(ta):
        return pa.int32()
    ta, tb = T.signed(ta), T.signed(tb)
    if op == "/":
        if T.is_float(ta) or T.is_float(tb) or not (T.is_decimal(ta) or T.is_decimal(tb)):
            return pa.float64()
        return T.decimal_result("/", ta, tb)
    if op == "div":
        return pa.int64()
    common = T.numeric_common(ta, tb)
    if T.is_decimal(common):
        return T.decimal_result(op, ta, tb)
    return common


def _bind_arith(call: Call) -> Term:
    a, b = call.args
    if call.fn in ("+", "-"):
        for x, y in ((a, b), (b, a)):
            if x.type == INTERVAL_TYPE and (call.fn == "+" or x is b):
                if y.type == INTERVAL_TYPE:
                    fail(call, "adding two intervals is only supported between constants")
                iv = literal_value(x, call, "an interval")
                shift = (
                    Literal(pa.scalar(None, pa.null()), pa.null())
                    if iv is None
                    else _iv_literal(-iv if call.fn == "-" else iv)
                )
                return bind_call(Call("interval_add", (y, shift)))
        for x, y, sign in ((a, b, 1), (b, a, -1)):
            if (
                pa.types.is_date(x.type)
                and (T.is_integer(y.type) or T.is_null(y.type))
                and (call.fn == "+" or sign == 1)
            ):
                return bind_call(Call("date_add" if call.fn == "+" else "date_sub", (x, y)))
        if T.is_temporal(a.type) and T.is_temporal(b.type) and call.fn == "-":
            fail(call, "subtracting dates or timestamps is not supported; use datediff(end, start)")
    t = _arith_type(call)
    if T.is_decimal(t):
        a2, b2 = (typed(x, T.as_decimal(T.signed(x.type))) if not T.is_null(x.type) else typed(x, t) for x in (a, b))
        return Call(call.fn, (a2, b2), (), t)
    if call.fn == "div":
        return Call("div", (typed(a, pa.int64()), typed(b, pa.int64())), (), t)
    return Call(call.fn, (typed(a, t), typed(b, t)), (), t)


def _iv_literal(iv: Interval) -> Literal:
    return Literal(iv, INTERVAL_TYPE)


_CHECKED = {"+": "add_checked", "-": "subtract_checked", "*": "multiply_checked"}
_UNCHECKED = {"+": "add", "-": "subtract", "*": "multiply"}


def _decimal_arith(call: Call, args: list) -> Expr:
    """``+ - * %`` on DECIMALs with Spark's result type: computed where Arrow's result type
    (the unrounded one) fits, in DECIMAL256 when it does not, then rounded half away from
    zero to the result's scale; a value beyond its precision is an error."""
    a, b = args
    ta, tb, out = call.args[0].type, call.args[1].type, call.type
    if call.fn == "%":
        scale = max(ta.scale, tb.scale)
        wide = pa.decimal256(min(max(ta.precision - ta.scale, tb.precision - tb.scale) + scale, 76), scale)
        return _cast(pc.remainder_checked(_cast(a, wide), _cast(b, wide)), out)
    if call.fn == "*":
        precision, scale = ta.precision + tb.precision + 1, ta.scale + tb.scale
    else:
        scale = max(ta.scale, tb.scale)
        precision = max(ta.precision - ta.scale, tb.precision - tb.scale) + scale + 1
    if precision <= T.MAX_PRECISION:
        return getattr(pc, _CHECKED[call.fn])(a, b)
    if precision > 76:
        fail(call, "DECIMAL arithmetic this wide is not supported (more than 76 digits before rounding)")
    wide = getattr(pc, _CHECKED[call.fn])(
        _cast(a, pa.decimal256(ta.precision, ta.scale)), _cast(b, pa.decimal256(tb.precision, tb.scale))
    )
    return _cast(pc.round(wide, out.scale, round_mode="half_towards_infinity"), out)


def _decimal_divide(call: Call, args: list) -> Expr:
    """Spark's DECIMAL division: the quotient rounded half away from zero to the result's
    scale. Arrow truncates at a scale it derives from the types, so the divisor's precision
    is widened until that scale passes the result's, and the rounding is done after."""
    a, b = args
    ta, tb, out = T.as_decimal(call.args[0].type), T.as_decimal(call.args[1].type), call.type
    p2 = max(tb.precision, out.scale - ta.scale + tb.scale)
    arrow_scale = max(4, ta.scale + p2 - tb.scale + 1)
    precision = ta.precision - ta.scale + tb.scale + arrow_scale
    if precision > 76 or p2 > 76:
        fail(call, "DECIMAL division this wide is not supported")
    kind = pa.decimal128 if precision <= T.MAX_PRECISION and p2 <= T.MAX_PRECISION else pa.decimal256
    q = pc.divide(_cast(a, kind(ta.precision, ta.scale)), _cast(b, kind(p2, tb.scale)))
    return _cast(pc.round(q, out.scale, round_mode="half_towards_infinity"), out)


def _arrow_arith(call: Call, args: list) -> Expr:
    t = call.type
    a, b = args
    if T.is_decimal(t):
        return _decimal_divide(call, args) if call.fn == "/" else _decimal_arith(call, args)
    if call.fn == "/":
        return pc.divide_checked(a, b)  # float: a zero divisor fails (Spark's DIVIDE_BY_ZERO)
    if call.fn == "%":
        return pc.remainder_checked(a, b)  # the dividend's sign, as Java's %; a zero divisor fails
    if call.fn == "div":
        return pc.divide_checked(a, b)  # integers: truncated toward zero
    return getattr(pc, _CHECKED[call.fn] if T.is_integer(t) else _UNCHECKED[call.fn])(a, b)


def _raises_arith(call: Call) -> bool:
    return call.fn in ("/", "%", "div") or not T.is_float(call.type)


def _monotone_arith(call: Call) -> tuple | None:
    if call.fn == "+":
        return (1, 1)
    if call.fn == "-":
        return (1, -1)
    if call.fn in ("*", "/"):
        other = call.args[1]
        if isinstance(other, Literal) and other.value.is_valid:
            v = other.value.as_py()
            if v > 0:
                return (1, 0)
            if v < 0:
                return (-1, 0)
        if call.fn == "*" and isinstance(call.args[0], Literal) and call.args[0].value.is_valid:
            v = call.args[0].value.as_py()
            return (0, 1) if v > 0 else (0, -1) if v < 0 else None
    return None


for _op in ("+", "-", "*", "/", "%", "div"):
    _register(_op, _bind_arith, _arrow_arith, raises=_raises_arith, monotone=_monotone_arith, summary="arithmetic")


def _bind_neg(call: Call) -> Term:
    _need(call, 0, T.is_numeric, "a number")
    t = T.signed(call.args[0].type) if not T.is_null(call.args[0].type) else pa.int32()
    return Call("neg", (typed(call.args[0], t),), (), t)


_register(
    "neg",
    _bind_neg,
    lambda c, a: pc.negate_checked(a[0]) if not T.is_float(c.type) else pc.negate(a[0]),
    raises=lambda c: T.is_integer(c.type),
    monotone=(-1,),
    summary="unary minus",
)


# --- math ---------------------------------------------------------------------------------------


def _bind_abs(call: Call) -> Term:
    _need(call, 0, T.is_numeric, "a number")
    t = T.signed(call.args[0].type)
    return Call("abs", (typed(call.args[0], t),), (), t)


_register(
    "abs",
    _bind_abs,
    lambda c, a: pc.abs_checked(a[0]) if T.is_integer(c.type) else pc.abs(a[0]),
    raises=lambda c: T.is_integer(c.type),
    summary="absolute value",
)


def _bind_round(call: Call) -> Term:
    _need(call, 0, T.is_numeric, "a number")
    x = call.args[0]
    digits = int_constant(call.args[1], call, "round's number of digits") if len(call.args) > 1 else 0
    t = T.signed(x.type)
    if T.is_decimal(t):
        p, s = t.precision, t.scale
        out = (
            pa.decimal128(min(p - s + 1 + min(s, digits), T.MAX_PRECISION), min(s, digits))
            if digits >= 0
            else pa.decimal128(min(max(p - s + 1, -digits + 1), T.MAX_PRECISION), 0)
        )
    else:
        out = t
    return Call("round", (typed(x, t),), (digits,), out)


def _arrow_round(call: Call, args: list) -> Expr:
    digits = call.opts[0]
    x = args[0]
    if T.is_integer(call.type) and digits >= 0:
        return x
    r = pc.round(_room(x, call.args[0].type), ndigits=digits, round_mode="half_towards_infinity")
    return _cast(r, call.type) if T.is_decimal(call.type) else r


_register(
    "round",
    _bind_round,
    _arrow_round,
    raises=lambda c: T.is_decimal(c.type) or T.is_integer(c.type),
    monotone=(1,),
    summary="round half away from zero",
)


def _bind_floor_ceil(call: Call) -> Term:
    _need(call, 0, T.is_numeric, "a number")
    x = call.args[0]
    t = T.signed(x.type)
    if T.is_integer(t):
        out = pa.int64()
    elif T.is_decimal(t):
        out = pa.decimal128(min(t.precision - t.scale + 1, T.MAX_PRECISION), 0)
    else:
        out = pa.float64()
    return Call(call.fn, (typed(x, t if not T.is_float(t) else pa.float64()),), (), out)


def _room_type(t: pa.DataType) -> pa.DataType:
    return pa.decimal128(t.precision + 1, t.scale) if T.is_decimal(t) and t.precision < T.MAX_PRECISION else t


def _room(x: Expr, t: pa.DataType) -> Expr:
    """A DECIMAL with one more integral digit (rounding 9.99 up needs one), where it fits.
    Needed, not only tidy: Arrow's round, evaluated in an expression, gives 0 for a value
    that outgrows its precision instead of failing."""
    wider = _room_type(t)
    return x if wider.equals(t) else _cast(x, wider)


def _arrow_floor_ceil(call: Call, args: list) -> Expr:
    x = args[0]
    if T.is_integer(call.type):
        return _cast(x, pa.int64())
    r = getattr(pc, call.fn)(_room(x, call.args[0].type))
    return _cast(r, call.type) if T.is_decimal(call.type) else r


_register("floor", _bind_floor_ceil, _arrow_floor_ceil, monotone=(1,), summary="round down")
_register("ceil", _bind_floor_ceil, _arrow_floor_ceil, monotone=(1,), summary="round up", aliases=("ceiling",))


# --- strings -------------------------------------------------------------------------------------


def _string_arg(call: Call, i: int) -> Term:
    x = call.args[i]
    if T.is_null(x.type):
        return typed(x, pa.string())
    if not T.is_string(x.type):
        fail(call, f"{call.fn} needs a string, not {T.describe(x.type)} (cast it first)")
    return x


def _bind_string_fn(call: Call) -> Term:
    """lower, upper, trim, ltrim, rtrim: one string (trim's characters a constant)."""
    x = _string_arg(call, 0)
    opts: tuple[Any, ...] = ()
    if call.fn in ("trim", "ltrim", "rtrim"):
        chars = literal_value(call.args[1], call, "the characters to trim") if len(call.args) > 1 else " "
        if not isinstance(chars, str):
            fail(call, "the characters to trim must be a string")
        opts = (chars,)
    return Call(call.fn, (x,), opts, x.type)


def _ascii_only(a: pa.Array) -> bool:
    """Whether the bytes of string array ``a``'s values are all ASCII (false where unsure)."""
    offsets, data = a.buffers()[1:3]
    if offsets is None or data is None:
        return data is None
    width = np.int64 if pa.types.is_large_string(a.type) else np.int32
    at = np.frombuffer(offsets, dtype=width, count=a.offset + len(a) + 1)
    values = np.frombuffer(data, dtype=np.uint8)[int(at[a.offset]) : int(at[-1])]
    return not values.size or int(values.max()) < 0x80


def _case_kernel(utf8: Callable[..., Any], ascii: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    """Arrow's Unicode case mapping of a batch, by its ASCII kernel where every byte is ASCII:
    on ASCII, Unicode's mapping is ASCII's, and the Unicode kernel decodes every character
    (several times slower on the ASCII text most columns hold)."""

    def kernel(ctx: Any, x: Any) -> Any:
        fast = isinstance(x, pa.Array) and _ascii_only(x)
        return (ascii if fast else utf8)(x, memory_pool=ctx.memory_pool)

    return kernel


_CASE_KERNELS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "lower": (pc.utf8_lower, pc.ascii_lower),
    "upper": (pc.utf8_upper, pc.ascii_upper),
}
_CASE_FUNCTIONS: dict[tuple[str, pa.DataType], str] = {}  # (lower / upper, string type): the Arrow function
for _case, (_utf8, _ascii) in _CASE_KERNELS.items():
    for _text in (pa.string(), pa.large_string()):
        _case_udf = f"lamina_{_case}_{_text}"
        _CASE_FUNCTIONS[(_case, _text)] = _case_udf
        pc.register_scalar_function(
            _case_kernel(_utf8, _ascii),
            _case_udf,
            {"summary": _case, "description": f"utf8_{_case}, by ascii_{_case} on a batch of ASCII text"},
            {"x": _text},
            _text,
        )


def _case_mapped(call: Call, x: Expr) -> Expr:
    """lower / upper of ``x`` (see ``_case_kernel``)."""
    udf = _CASE_FUNCTIONS.get((call.fn, call.args[0].type))
    if udf is None:
        return _CASE_KERNELS[call.fn][0](x)
    return pc.Expression._call(udf, [x])


_STRING_KERNELS: dict[str, Callable[[Call, list], Expr]] = {
    "lower": lambda c, a: _case_mapped(c, a[0]),
    "upper": lambda c, a: _case_mapped(c, a[0]),
    "trim": lambda c, a: pc.utf8_trim(a[0], characters=c.opts[0]),
    "ltrim": lambda c, a: pc.utf8_ltrim(a[0], characters=c.opts[0]),
    "rtrim": lambda c, a: pc.utf8_rtrim(a[0], characters=c.opts[0]),
}
for _name, _kernel in _STRING_KERNELS.items():
    _register(_name, _bind_string_fn, _kernel, summary="string function", strict=True)


def _bind_length(call: Call) -> Term:
    x = call.args[0]
    if not (T.is_string(x.type) or T.is_binary(x.type) or T.is_null(x.type)):
        fail(call, f"length needs a string or binary value, not {T.describe(x.type)}")
    return Call("length", (typed(x, pa.string()) if T.is_null(x.type) else x,), (), pa.int32())


_register(
    "length",
    _bind_length,
    lambda c, a: _cast(pc.utf8_length(a[0]) if T.is_string(c.args[0].type) else pc.binary_length(a[0]), pa.int32()),
    summary="characters (bytes of a binary)",
    aliases=("char_length", "character_length"),
)


def _bind_substring(call: Call) -> Term:
    x = _string_arg(call, 0)
    pos = int_constant(call.args[1], call, "substring's start")
    length = int_constant(call.args[2], call, "substring's length") if len(call.args) > 2 else None
    return Call("substring", (x,), (pos, length), x.type)


def _arrow_substring(call: Call, args: list) -> Expr:
    """Spark's substring: 1-based ``pos`` (0 is 1; negative counts from the end), ``length``
    characters (none for a negative length)."""
    pos, length = call.opts
    if length is not None and length <= 0:
        return pc.if_else(args[0].is_valid(), const("", call.type), null_scalar(call.type))
    start = pos - 1 if pos > 0 else pos  # negative: from the end, as Arrow's slices count
    if length is None:
        return pc.utf8_slice_codeunits(args[0], start=start)
    stop = start + length
    if pos < 0 and stop >= 0:
        return pc.utf8_slice_codeunits(args[0], start=start)
    return pc.utf8_slice_codeunits(args[0], start=start, stop=stop)


def _monotone_substring(call: Call) -> tuple | None:
    # A prefix (substring(s, 1, n)) keeps the order of strings: a <= b gives prefix(a) <= prefix(b).
    return (1,) if call.opts[0] in (0, 1) else None


_register(
    "substring",
    _bind_substring,
    _arrow_substring,
    monotone=_monotone_substring,
    summary="substring(s, pos[, len])",
    aliases=("substr",),
)


def _bind_concat(call: Call) -> Term:
    args = []
    for a in call.args:
        if T.is_string(a.type):
            args.append(a)
        elif (
            T.is_null(a.type)
            or T.is_integer(a.type)
            or pa.types.is_date(a.type)
            or pa.types.is_boolean(a.type)
            or T.is_decimal(a.type)
        ):
            args.append(typed(a, pa.string()))
        else:
            fail(
                call,
                f"concatenating a {T.describe(a.type)} is not supported (cast it to STRING first where Arrow and Spark format it alike)",
            )
    return Call("concat", tuple(args), (), pa.string())


_register("concat", _bind_concat, lambda c, a: pc.binary_join_element_wise(*a, ""), summary="concat, ||")


def _bind_pattern_fn(call: Call) -> Term:
    """starts_with, ends_with, contains: a string and a constant string."""
    x = _string_arg(call, 0)
    pattern = literal_value(call.args[1], call, f"the second argument of {call.fn}")
    if pattern is None:
        return Literal(pa.scalar(None, _BOOL), _BOOL)
    if not isinstance(pattern, str):
        fail(call, f"the second argument of {call.fn} must be a string")
    return Call(call.fn, (x,), (pattern,), _BOOL)


_register(
    "starts_with",
    _bind_pattern_fn,
    lambda c, a: pc.starts_with(a[0], pattern=c.opts[0]),
    summary="prefix test",
    aliases=("startswith",),
)
_register(
    "ends_with",
    _bind_pattern_fn,
    lambda c, a: pc.ends_with(a[0], pattern=c.opts[0]),
    summary="suffix test",
    aliases=("endswith",),
)
_register(
    "contains", _bind_pattern_fn, lambda c, a: pc.match_substring(a[0], pattern=c.opts[0]), summary="substring test"
)


def like_parts(pattern: str, escape: str) -> list[tuple[str, str]]:
    """A LIKE pattern as (kind, text) parts: ("lit", text), ("any", "%"), ("one", "_");
    InvalidPredicate where Spark refuses the escape (it may precede only _, % and itself)."""
    parts: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape and c == escape:
            if i + 1 == len(pattern):
                raise InvalidPredicate(f"LIKE pattern {pattern!r} ends with its escape character {escape!r}")
            nxt = pattern[i + 1]
            if nxt not in ("_", "%", escape):
                raise InvalidPredicate(
                    f"LIKE pattern {pattern!r}: the escape character {escape!r} may only precede _, % or itself, not {nxt!r}"
                )
            parts.append(("lit", nxt))
            i += 2
            continue
        parts.append(("any", c) if c == "%" else ("one", c) if c == "_" else ("lit", c))
        i += 1
    merged: list[tuple[str, str]] = []
    for kind, text in parts:
        if merged and kind == "lit" and merged[-1][0] == "lit":
            merged[-1] = ("lit", merged[-1][1] + text)
        elif merged and kind == "any" and merged[-1][0] == "any":
            continue
        else:
            merged.append((kind, text))
    return merged


def _bind_like(call: Call) -> Term:
    x = _string_arg(call, 0)
    pattern = literal_value(call.args[1], call, "a LIKE pattern")
    escape = call.opts[0] if call.opts else "\\"
    if pattern is None:
        return Literal(pa.scalar(None, _BOOL), _BOOL)
    if not isinstance(pattern, str):
        fail(call, "a LIKE pattern must be a string")
    if escape is not None and len(escape) != 1:
        fail(call, f"a LIKE escape must be one character, not {escape!r}")
    like_parts(pattern, escape)  # refuses a bad escape now
    return Call(call.fn, (x,), (escape, pattern), _BOOL)


def _arrow_like(call: Call, args: list) -> Expr:
    escape, pattern = call.opts
    parts = like_parts(pattern, escape)
    negate = call.fn.startswith("not_")
    ignore_case = call.fn.endswith("ilike")
    x = args[0]
    kinds = [k for k, _ in parts]
    out = None
    if not ignore_case:
        if kinds == ["lit"]:
            out = x == const(parts[0][1], pa.string())
        elif kinds == ["lit", "any"]:
            out = pc.starts_with(x, pattern=parts[0][1])
        elif kinds == ["any", "lit"]:
            out = pc.ends_with(x, pattern=parts[1][1])
        elif kinds == ["any", "lit", "any"]:
            out = pc.match_substring(x, pattern=parts[1][1])
        elif kinds == ["any"]:
            out = pc.if_else(x.is_valid(), pc.scalar(True), null_scalar(_BOOL))
    if out is None:  # Arrow's own LIKE, with backslash as the escape
        text = "".join("".join("\\" + c if c in "%_\\" else c for c in t) if k == "lit" else t for k, t in parts)
        out = pc.match_like(x, pattern=text, ignore_case=ignore_case)
    return ~out if negate else out


for _name in ("like", "not_like", "ilike", "not_ilike"):
    _register(_name, _bind_like, _arrow_like, summary="[NOT] [I]LIKE pattern [ESCAPE c]")


# --- conditionals -------------------------------------------------------------------------------------


def _common_of(call: Call, terms: list[Term]) -> pa.DataType:
    t = pa.null()
    for x in terms:
        t = T.common_type(t, x.type, term_sql(call))
    return t


def _bind_case(call: Call) -> Term:
    # args: cond1, value1, ..., condN, valueN, else
    conds, values = list(call.args[0:-1:2]), [*call.args[1:-1:2], call.args[-1]]
    for c in conds:
        if not (pa.types.is_boolean(c.type) or T.is_null(c.type)):
            fail(call, f"a CASE condition must be a boolean, not {T.describe(c.type)}")
    t = _common_of(call, values)
    args: list[Term] = []
    for c, v in zip(conds, values):
        args += [typed(c, _BOOL), typed(v, t)]
    args.append(typed(values[-1], t))
    return Call("case", tuple(args), (), t)


def _arrow_case(call: Call, args: list) -> Expr:
    conds, values = args[0:-1:2], [*args[1:-1:2], args[-1]]
    if len(conds) == 1:
        return pc.if_else(fill(conds[0], False), values[0], values[1])
    names = [str(i) for i in range(len(conds))]
    return pc.case_when(pc.make_struct(*[fill(c, False) for c in conds], field_names=names), *values)


_register("case", _bind_case, _arrow_case, monotone=None, summary="CASE WHEN ... THEN ... ELSE ... END, IF")


def _bind_coalesce(call: Call) -> Term:
    t = _common_of(call, list(call.args))
    return Call("coalesce", tuple(typed(a, t) for a in call.args), (), t)


_register(
    "coalesce", _bind_coalesce, lambda c, a: pc.coalesce(*a) if len(a) > 1 else a[0], summary="COALESCE, IFNULL, NVL"
)


def _bind_nullif(call: Call) -> Term:
    a, b = call.args
    t = T.common_type(a.type, b.type, term_sql(call))
    return Call("nullif", (a, typed(b, t)), (t,), a.type)


def _arrow_nullif(call: Call, args: list) -> Expr:
    a, b = args
    t = call.opts[0]
    at = a if call.args[0].type.equals(t) else _cast_expr(a, call.args[0].type, t, safe=False)
    eq = compare("=", at, b, Call("x", (), (), t), call.args[1])
    return pc.if_else(fill(eq, False), null_scalar(call.type), a)


_register("nullif", _bind_nullif, _arrow_nullif, summary="NULLIF")


# --- casts ----------------------------------------------------------------------------------------------


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if pa.types.is_signed_integer(t) else (0, 2**bits - 1)


def castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether CAST from ``src`` to ``dst`` is supported (with Spark's meaning)."""
    if src.equals(dst) or T.is_null(src):
        return True
    if T.is_numeric(src) or pa.types.is_boolean(src):
        return T.is_numeric(dst) or pa.types.is_boolean(dst) or (T.is_string(dst) and not T.is_float(src))
    if T.is_string(src):
        return (
            T.is_numeric(dst) or pa.types.is_boolean(dst) or T.is_temporal(dst) or T.is_string(dst) or T.is_binary(dst)
        )
    if pa.types.is_date(src):
        return T.is_temporal(dst) or T.is_string(dst)
    if pa.types.is_timestamp(src):
        return T.is_temporal(dst)
    if T.is_binary(src):
        return T.is_string(dst) or T.is_binary(dst)
    return False


def _bind_cast(call: Call) -> Term:
    x = call.args[0]
    dst = call.opts[0]
    if not castable(x.type, dst):
        fail(call, f"CAST from {T.describe(x.type)} to {T.describe(dst)} is not supported")
    if isinstance(x, Literal):
        from lamina.expr.typer import fold_cast

        return fold_cast(x, dst, strict=call.fn == "cast")
    if x.type.equals(dst):
        return x
    return Call(call.fn, (x,), (dst,), dst)


_SPARK_TRUE = ["t", "true", "y", "yes", "1"]
_SPARK_FALSE = ["f", "false", "n", "no", "0"]
_INT_TEXT = r"^[+-]?[0-9]+$"
_FLOAT_TEXT = r"^[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|nan|inf|infinity)$"
_DECIMAL_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$"
_TS_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([ T][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?)?(Z|[+-][0-9]{2}:?[0-9]{2})?$"
_OFFSET_TEXT = r"(Z|[+-][0-9]{2}:?[0-9]{2})$"


def _where(ok: Expr, x: Expr, t: pa.DataType) -> Expr:
    """``x`` where ``ok`` is TRUE, else null (of type ``t``)."""
    return pc.if_else(fill(ok, False), x, null_scalar(t))


def _cast_expr(x: Expr, src: pa.DataType, dst: pa.DataType, safe: bool) -> Expr:
    """CAST (``safe``: TRY_CAST, null where the value does not fit) with Spark's meaning:
    floats and DECIMALs to integers truncate toward zero, to DECIMALs round half away from
    zero; strings are trimmed, read as Spark reads them; an integer out of range, NaN to an
    integer, a string that is no such value are errors (or null)."""
    if src.equals(dst) or T.is_null(src):
        return _cast(x, dst)
    if T.is_string(src):
        return _cast_string(x, dst, safe)
    if T.is_decimal(src) and T.is_float(dst):
        # Through the decimal's exact text: Arrow's cast multiplies by a power of ten, off by an
        # ulp (0.3 becomes 0.30000000000000004); parsing the text rounds once, to the nearest.
        return _cast(_cast(x, pa.string()), dst)
    if T.is_numeric(src) and T.is_float(dst):
        return _cast(x, dst, safe=False)  # rounds to the nearest (Arrow's checked cast refuses inexact ones)
    if T.is_float(src) and T.is_integer(dst):
        t = pc.trunc(x)
        if not safe:
            return _cast(t, dst)  # Arrow refuses what does not fit, NaN and inf too
        lo, hi = _int_range(dst)
        ok = (t >= const(float(lo), pa.float64())) & (t < const(float(hi) + 1.0, pa.float64()))
        return _cast(_where(ok, t, src), dst)
    if T.is_decimal(src) and T.is_integer(dst):
        t = pc.trunc(_room(x, src))
        if not safe:
            return _cast(t, dst)
        lo, hi = _int_range(dst)
        wide = _cast(t, pa.float64())  # a range test: an integer range's ends are doubles
        ok = (wide >= const(float(lo), pa.float64())) & (wide < const(float(hi) + 1.0, pa.float64()))
        return _cast(_where(ok, t, _room_type(src)), dst)
    if T.is_decimal(dst) and (T.is_float(src) or T.is_decimal(src)):
        r = (
            x
            if T.is_decimal(src) and src.scale <= dst.scale
            else pc.round(_room(x, src), ndigits=dst.scale, round_mode="half_towards_infinity")
        )
        if not safe:
            return _cast(r, dst)
        bound = float(10 ** (dst.precision - dst.scale))
        magnitude = pc.abs(r if T.is_float(src) else _cast(r, pa.float64()))
        rt = src if T.is_float(src) or (T.is_decimal(src) and src.scale <= dst.scale) else _room_type(src)
        return _cast(_where(magnitude < const(bound, pa.float64()), r, rt), dst)
    if T.is_integer(src) and T.is_decimal(dst) and safe:
        bound = 10 ** (dst.precision - dst.scale)
        wide = _cast(x, pa.int64()) if src != pa.uint64() else x
        ok = (
            (wide > const(-bound, pa.int64())) & (wide < const(bound, pa.int64()))
            if bound <= 2**62
            else pc.scalar(True)
        )
        return _cast(_where(ok, x, src), dst)
    if T.is_integer(src) and T.is_integer(dst) and safe:
        lo, hi = _int_range(dst)
        slo, shi = _int_range(src)
        ok = pc.scalar(True)
        if lo > slo:
            ok = ok & (x >= const(lo, src))
        if hi < shi:
            ok = ok & (x <= const(hi, src))
        return _cast(_where(ok, x, src), dst)
    if pa.types.is_boolean(dst) and T.is_numeric(src):
        return _cast(x, dst)
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        return (
            _cast(_cast(x, pa.timestamp(src.unit, "UTC" if src.tz else None)), dst)
            if (src.tz is None) != (dst.tz is None)
            else _cast(x, dst)
        )
    return _cast(x, dst)


def _cast_string(x: Expr, dst: pa.DataType, safe: bool) -> Expr:
    s = pc.utf8_trim_whitespace(x)
    if T.is_string(dst):
        return _cast(x, dst)
    if T.is_binary(dst):
        return _cast(x, dst)
    if pa.types.is_boolean(dst):
        low = pc.utf8_lower(s)
        is_true = low.isin(pa.array(_SPARK_TRUE))
        is_false = low.isin(pa.array(_SPARK_FALSE))
        known = is_true | is_false
        value = pc.if_else(is_true, pc.scalar(True), pc.scalar(False))
        if safe:
            return _where(known, value, _BOOL)
        # not one of them: Arrow's own parse fails on it (as Spark's ANSI cast does)
        return pc.if_else(known, value, _cast(pc.if_else(known, null_scalar(pa.string()), s), _BOOL))
    unsigned = pc.replace_substring_regex(s, pattern=r"^\+", replacement="")
    if T.is_integer(dst):
        if not safe:
            return _cast(unsigned, dst)
        ok = pc.match_substring_regex(s, _INT_TEXT) & (pc.utf8_length(unsigned) <= const(20, pa.int32()))
        wide = _cast(_where(ok, unsigned, pa.string()), pa.decimal128(38, 0))
        lo, hi = _int_range(dst)
        fits = (wide >= const(decimal.Decimal(lo), pa.decimal128(38, 0))) & (
            wide <= const(decimal.Decimal(hi), pa.decimal128(38, 0))
        )
        return _cast(_where(fits, wide, pa.decimal128(38, 0)), dst)
    if T.is_float(dst):
        text = pc.replace_substring_regex(pc.utf8_lower(unsigned), pattern=r"^(-?)inf$", replacement=r"\1infinity")
        if not safe:
            return _cast(text, dst)
        ok = pc.match_substring_regex(pc.utf8_lower(s), _FLOAT_TEXT)
        return _cast(_where(ok, text, pa.string()), dst)
    if T.is_decimal(dst):
        # Digits past the first one beyond the scale cannot change a half-away-from-zero
        # rounding: cut them, read the rest exactly, round.
        keep = min(dst.scale + 1, T.MAX_PRECISION - 1)
        cut = pc.replace_substring_regex(
            unsigned, pattern=rf"^([+-]?[0-9]*\.[0-9]{{{keep}}})[0-9]+$", replacement=r"\1"
        )
        if safe:
            cut = _where(
                pc.match_substring_regex(s, _DECIMAL_TEXT)
                & (pc.utf8_length(cut) <= const(T.MAX_PRECISION, pa.int32())),
                cut,
                pa.string(),
            )
        wide = pa.decimal128(T.MAX_PRECISION, keep)
        return _cast_expr(_cast(cut, wide), wide, dst, safe)
    if pa.types.is_date(dst):
        day = pc.utf8_slice_codeunits(s, 0, 10)
        parsed = pc.strptime(day, format="%Y-%m-%d", unit="s", error_is_null=True)
        ok = pc.match_substring_regex(s, r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([ T].*)?$") & parsed.is_valid()
        date = _cast(parsed, pa.date32())
        if safe:
            return _where(ok, date, dst)
        return pc.if_else(
            fill(ok, True), date, _cast(pc.if_else(fill(ok, True), null_scalar(pa.string()), s), pa.date32())
        )
    if pa.types.is_timestamp(dst):
        iso = pc.replace_substring(s, pattern="T", replacement=" ", max_replacements=1)
        day_ok = pc.strptime(
            pc.utf8_slice_codeunits(iso, 0, 10), format="%Y-%m-%d", unit="s", error_is_null=True
        ).is_valid()
        ok = pc.match_substring_regex(s, _TS_TEXT) & day_ok
        if safe:
            iso = _where(ok, iso, pa.string())
        zoned = pc.match_substring_regex(iso, _OFFSET_TEXT)
        naive = _cast(pc.if_else(fill(zoned, False), null_scalar(pa.string()), iso), pa.timestamp(dst.unit))
        with_zone = _cast(pc.if_else(fill(zoned, False), iso, null_scalar(pa.string())), pa.timestamp(dst.unit, "UTC"))
        if dst.tz is None:
            out = pc.if_else(fill(zoned, False), _cast(_cast(with_zone, pa.int64()), dst), naive)
        else:
            out = pc.if_else(fill(zoned, False), with_zone, _cast(naive, pa.timestamp(dst.unit, "UTC")))
        return _cast(out, dst)
    raise AssertionError((dst,))


def _raises_cast(call: Call) -> bool:
    if call.fn == "try_cast":
        return False
    src, dst = call.args[0].type, call.type
    if T.is_string(src) and not T.is_string(dst):
        return True
    if T.is_numeric(src) and T.is_numeric(dst):
        if T.is_float(dst):
            return False
        if T.is_integer(src) and T.is_integer(dst):
            return _int_range(dst)[0] > _int_range(src)[0] or _int_range(dst)[1] < _int_range(src)[1]
        return True
    return False


def _monotone_cast(call: Call) -> tuple | None:
    src, dst = call.args[0].type, call.type
    if (T.is_numeric(src) or pa.types.is_boolean(src)) and T.is_numeric(dst):
        return (1,)
    if T.is_temporal(src) and T.is_temporal(dst):
        return (1,)
    if T.is_string(src) and T.is_string(dst):
        return (1,)
    return None


_register(
    "cast",
    _bind_cast,
    lambda c, a: _cast_expr(a[0], c.args[0].type, c.type, safe=False),
    raises=_raises_cast,
    monotone=_monotone_cast,
    summary="CAST(x AS type), x::type",
)
_register(
    "try_cast",
    _bind_cast,
    lambda c, a: _cast_expr(a[0], c.args[0].type, c.type, safe=True),
    monotone=_monotone_cast,
    summary="TRY_CAST(x AS type): null where the value does not fit",
)


# --- dates and times ----------------------------------------------------------------------------------

_UNITS = {
    "year": "year",
    "yyyy": "year",
    "yy": "year",
    "years": "year",
    "quarter": "quarter",
    "quarters": "quarter",
    "month": "month",
    "mon": "month",
    "mm": "month",
    "months": "month",
    "week": "week",
    "weeks": "week",
    "day": "day",
    "dd": "day",
    "days": "day",
    "hour": "hour",
    "hours": "hour",
    "minute": "minute",
    "minutes": "minute",
    "second": "second",
    "seconds": "second",
    "millisecond": "millisecond",
    "milliseconds": "millisecond",
    "microsecond": "microsecond",
    "microseconds": "microsecond",
}
_DATE_UNITS = ("year", "quarter", "month", "week")


def utc_type(t: pa.DataType) -> pa.DataType:
    return pa.timestamp(t.unit, "UTC") if pa.types.is_timestamp(t) and t.tz is not None else t


def _temporal_arg(call: Call, i: int = 0, dates_only: bool = False) -> Term:
    x = call.args[i]
    if T.is_string(x.type):
        return typed(x, pa.date32() if dates_only else pa.timestamp("us", "UTC"))
    if T.is_null(x.type):
        return typed(x, pa.date32())
    if not T.is_temporal(x.type):
        fail(call, f"{call.fn} needs a date or a timestamp, not {T.describe(x.type)}")
    if dates_only and not pa.types.is_date(x.type):
        return typed(x, pa.date32())
    return typed(x, utc_type(x.type))


def _unit(call: Call, value: Any, allowed: tuple[str, ...] | None = None) -> str:
    unit = _UNITS.get(str(value).lower()) if isinstance(value, str) else None
    if unit is None or (allowed is not None and unit not in allowed):
        names = ", ".join(
            allowed
            or ("year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond", "microsecond")
        )
        fail(call, f"unknown unit {value!r}; use one of {names}")
    return unit


def _bind_date_trunc(call: Call) -> Term:
    unit = _unit(call, call.opts[0] if call.opts else literal_value(call.args[0], call, "date_trunc's unit"))
    x = _temporal_arg(call, 1 if not call.opts else 0)
    if pa.types.is_date(x.type):
        x = typed(x, pa.timestamp("us", "UTC"))  # Spark: a date is truncated as a timestamp
    return Call("date_trunc", (x,), (unit,), x.type)


def _bind_trunc(call: Call) -> Term:
    unit = _unit(call, call.opts[0] if call.opts else literal_value(call.args[1], call, "trunc's unit"), _DATE_UNITS)
    x = _temporal_arg(call, 0, dates_only=True)
    return Call("trunc", (x,), (unit,), pa.date32())


def _arrow_trunc(call: Call, args: list) -> Expr:
    return pc.floor_temporal(args[0], unit=call.opts[0], week_starts_monday=True)


_register("date_trunc", _bind_date_trunc, _arrow_trunc, monotone=(1,), summary="date_trunc(unit, ts)")
_register("trunc", _bind_trunc, _arrow_trunc, monotone=(1,), summary="trunc(date, unit)")

_FIELDS = {
    "year": lambda x: pc.year(x),
    "quarter": lambda x: pc.quarter(x),
    "month": lambda x: pc.month(x),
    "day": lambda x: pc.day(x),
    "dayofweek": lambda x: pc.day_of_week(x, count_from_zero=False, week_start=7),
    "dayofyear": lambda x: pc.day_of_year(x),
    "hour": lambda x: pc.hour(x),
    "minute": lambda x: pc.minute(x),
    "second": lambda x: pc.second(x),
}
# A field is monotone in its argument within the next larger unit (month within a year...):
# ``lamina.expr.bounds`` checks that the bounds share that unit.
FIELD_WITHIN = {
    "year": None,
    "quarter": "year",
    "month": "year",
    "day": "month",
    "dayofyear": "year",
    "hour": "day",
    "minute": "hour",
    "second": "minute",
    "dayofweek": "week",
}


def _bind_field(call: Call) -> Term:
    x = _temporal_arg(call)
    if call.fn in ("hour", "minute", "second") and pa.types.is_date(x.type):
        x = typed(x, pa.timestamp("us", "UTC"))
    return Call(call.fn, (x,), (), pa.int32())


for _name, _fn in _FIELDS.items():
    _register(
        _name,
        _bind_field,
        lambda c, a, f=_fn: _cast(f(a[0]), pa.int32()),
        monotone=(1,) if _name == "year" else None,
        summary="date/time field",
        aliases={"day": ("dayofmonth",)}.get(_name, ()),
    )


def _date_arg(call: Call, i: int) -> Term:
    x = call.args[i]
    if T.is_string(x.type) or pa.types.is_timestamp(x.type) or T.is_null(x.type):
        return typed(x, pa.date32())
    if not pa.types.is_date(x.type):
        fail(call, f"{call.fn} needs a date, not {T.describe(x.type)}")
    return x


def _int_arg(call: Call, i: int) -> Term:
    x = call.args[i]
    if not (T.is_integer(x.type) or T.is_null(x.type)):
        fail(call, f"{call.fn} needs an integer, not {T.describe(x.type)}")
    return typed(x, pa.int32())


def _bind_date_add(call: Call) -> Term:
    return Call(call.fn, (_date_arg(call, 0), _int_arg(call, 1)), (), pa.date32())


def _arrow_date_add(call: Call, args: list) -> Expr:
    days = _cast(args[0], pa.int32())
    op = pc.add_checked if call.fn == "date_add" else pc.subtract_checked
    return _cast(op(days, args[1]), pa.date32())


_register(
    "date_add", _bind_date_add, _arrow_date_add, raises=True, monotone=(1, 1), summary="date_add(d, days), d + days"
)
_register(
    "date_sub", _bind_date_add, _arrow_date_add, raises=True, monotone=(1, -1), summary="date_sub(d, days), d - days"
)


def _bind_datediff(call: Call) -> Term:
    return Call("datediff", (_date_arg(call, 0), _date_arg(call, 1)), (), pa.int32())


_register(
    "datediff",
    _bind_datediff,
    lambda c, a: _cast(pc.subtract(_cast(a[0], pa.int32()), _cast(a[1], pa.int32())), pa.int32()),
    monotone=(1, -1),
    summary="datediff(end, start): days",
)


def _bind_add_months(call: Call) -> Term:
    return Call("add_months", (_date_arg(call, 0), _int_arg(call, 1)), (), pa.date32())


_ADD_MONTHS = "lamina_add_months"


def _add_months_kernel(ctx: Any, dates: Any, months: Any) -> pa.Array:
    """The kernel of ``add_months`` on whole arrays (NumPy's calendar months): an Arrow
    scalar function, as one expression node. Built from Arrow's arithmetic instead, the
    civil-date formulas reuse their intermediate values, and an expression (which Arrow
    evaluates as a tree, not a graph) grows exponentially with each reuse."""
    n = max(len(x) if isinstance(x, pa.Array) else 1 for x in (dates, months))
    d = dates if isinstance(dates, pa.Array) else pa.repeat(dates, n)
    k = months if isinstance(months, pa.Array) else pa.repeat(months, n)
    valid = pc.and_(d.is_valid(), k.is_valid()).to_numpy(zero_copy_only=False)
    days = d.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False).astype("datetime64[D]")
    shift = k.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    month = days.astype("datetime64[M]")
    day = (days - month.astype("datetime64[D]")).astype(np.int64)
    target = month + shift.astype("timedelta64[M]")
    length = ((target + 1).astype("datetime64[D]") - target.astype("datetime64[D]")).astype(np.int64)
    out = target.astype("datetime64[D]") + np.minimum(day, length - 1).astype("timedelta64[D]")
    return pa.array(out.astype(np.int64).astype(np.int32), pa.int32(), mask=~valid).cast(pa.date32())


pc.register_scalar_function(
    _add_months_kernel,
    _ADD_MONTHS,
    {"summary": "date plus months", "description": "Spark's add_months: the day clamped to the month's last."},
    {"date": pa.date32(), "months": pa.int64()},
    pa.date32(),
)


def add_months(date: Expr, months: Expr) -> Expr:
    """``date`` plus ``months`` months, the day clamped to the month's last (Spark's
    add_months and month INTERVALs)."""
    return pc.Expression._call(_ADD_MONTHS, [date, _cast(months, pa.int64())])


_register(
    "add_months",
    _bind_add_months,
    lambda c, a: add_months(a[0], a[1]),
    raises=True,
    monotone=(1, 1),
    summary="add_months(d, n)",
)


def _bind_interval_add(call: Call) -> Term:
    x, iv_term = call.args
    iv = literal_value(iv_term, call, "an interval")
    if iv is None:
        return Literal(pa.scalar(None, pa.timestamp("us", "UTC")), pa.timestamp("us", "UTC"))
    if T.is_string(x.type):
        x = typed(x, pa.timestamp("us", "UTC"))
    if not T.is_temporal(x.type) and not T.is_null(x.type):
        fail(call, f"an INTERVAL can be added to a date or a timestamp, not {T.describe(x.type)}")
    if T.is_null(x.type):
        x = typed(x, pa.date32())
    if pa.types.is_date(x.type) and iv.micros:
        x = typed(x, pa.timestamp("us", "UTC"))
    x = typed(x, utc_type(x.type))
    return Call("interval_add", (x, Literal(iv, INTERVAL_TYPE)), (), x.type)


def _arrow_interval_add(call: Call, args: list) -> Expr:
    """Spark's order: months (the day clamped), then days, then microseconds."""
    interval = call.args[1]
    assert isinstance(interval, Literal)  # bound: an interval is always a constant
    iv: Interval = interval.value
    x = args[0]
    t = call.type
    if pa.types.is_date(t):
        out = add_months(x, const(iv.months, pa.int64())) if iv.months else x
        if iv.days:
            out = _cast(pc.add_checked(_cast(out, pa.int32()), const(iv.days, pa.int32())), pa.date32())
        return out
    per_us = {"s": None, "ms": None, "us": 1, "ns": 1000}[t.unit]
    if per_us is None and (iv.micros % {"s": 1_000_000, "ms": 1000}[t.unit]):
        raise InvalidPredicate(f"an INTERVAL with microseconds cannot be added to a {t} column")
    if iv.months:
        day = _cast(x, pa.date32())
        time_of_day = pc.subtract(_cast(x, pa.int64()), _cast(_cast(day, t), pa.int64()))
        moved = _cast(_cast(add_months(day, const(iv.months, pa.int64())), t), pa.int64())
        x = _cast(pc.add_checked(moved, time_of_day), t)
    units = iv.days * 86_400_000_000 + iv.micros
    if units:
        step = units * per_us if per_us else units // {"s": 1_000_000, "ms": 1000}[t.unit]
        x = _cast(pc.add_checked(_cast(x, pa.int64()), const(step, pa.int64())), t)
    return x


_register(
    "interval_add",
    _bind_interval_add,
    _arrow_interval_add,
    raises=True,
    monotone=(1, 0),
    summary="date or timestamp +/- INTERVAL",
)


# --- nested values ---------------------------------------------------------------------------------------


def _bind_element_at(call: Call) -> Term:
    """element_at(map, key), element_at(array, index from 1), try_element_at, and x[k]
    (``subscript``: an array's index from 0, as in Spark; a map's key; a struct's field)."""
    x, k = call.args
    t = x.type
    if pa.types.is_map(t):
        key = literal_value(k, call, "a map key")
        assert isinstance(k, Literal)  # literal_value raised otherwise
        if key is None:
            return Literal(pa.scalar(None, t.item_type), t.item_type)
        from lamina.expr.typer import fold_cast

        kt = fold_cast(
            Literal(pa.scalar(key, T.literal_type(key)) if not isinstance(k.value, pa.Scalar) else k.value, k.type),
            t.key_type,
            strict=True,
        )
        return Call("map_get", (x,), (kt.value,), t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        index = int_constant(k, call, "an array index")
        if call.fn == "subscript":
            index += 1  # [] counts from 0
            if index <= 0:
                fail(call, "an array index given in [] must be 0 or more")
        elif index == 0:
            fail(call, "SQL array indices start at 1")
        if index < 0:
            fail(call, "negative array indices (from the end) are not supported")
        return Call("list_get" if call.fn != "try_element_at" else "try_list_get", (x,), (index,), t.value_type)
    if pa.types.is_struct(t) and call.fn == "subscript":
        name = literal_value(k, call, "a field name")
        return bind_call(Call("field", (x,), (name,)))
    fail(call, f"{call.fn} needs a map or an array, not {T.describe(t)}")


_register("element_at", _bind_element_at, lambda c, a: None, summary="element_at(map, key), element_at(array, index)")
_register("try_element_at", _bind_element_at, lambda c, a: None, summary="try_element_at: null out of range")
_register("subscript", _bind_element_at, lambda c, a: None, summary="x[k]")
_register("map_get", lambda c: c, lambda c, a: pc.map_lookup(a[0], pa.scalar(c.opts[0]), "first"), summary="map lookup")
_register(
    "list_get", lambda c: c, lambda c, a: pc.list_element(a[0], c.opts[0] - 1), raises=True, summary="array index"
)


def _arrow_try_list_get(call: Call, args: list) -> Expr:
    i = call.opts[0]
    ok = pc.list_value_length(args[0]) >= const(i, pa.int32())
    return pc.list_element(_where(ok, args[0], call.args[0].type), i - 1)


_register("try_list_get", lambda c: c, _arrow_try_list_get, summary="array index, null out of range")


def _bind_field_access(call: Call) -> Term:
    x = call.args[0]
    name = call.opts[0]
    if not pa.types.is_struct(x.type):
        fail(call, f"{T.describe(x.type)} has no field {name!r}")
    names = [x.type.field(i).name for i in range(x.type.num_fields)]
    match = [i for i, n in enumerate(names) if n == name] or [
        i for i, n in enumerate(names) if n.lower() == str(name).lower()
    ]
    if len(match) != 1:
        fail(call, f"no field {name!r} in {T.describe(x.type)}; its fields are {names}")
    return Call("field", (x,), (names[match[0]], match[0]), x.type.field(match[0]).type)


_register("field", _bind_field_access, lambda c, a: pc.struct_field(a[0], [c.opts[1]]), summary="struct field")


def _bind_size(call: Call) -> Term:
    x = call.args[0]
    if not (pa.types.is_list(x.type) or pa.types.is_large_list(x.type) or pa.types.is_fixed_size_list(x.type)):
        fail(call, f"size needs an array, not {T.describe(x.type)}")
    return Call("size", (x,), (), pa.int32())


_register(
    "size",
    _bind_size,
    lambda c, a: _cast(pc.list_value_length(a[0]), pa.int32()),
    summary="size(array)",
    aliases=("cardinality",),
)


def bind_call(call: Call) -> Term:
    """Type a call whose arguments are bound."""
    f = FUNCTIONS.get(call.fn)
    if f is None:
        raise InvalidPredicate(f"unknown function {call.fn}")
    return f.bind(call)


def supported_functions() -> list[str]:
    """The names users can call (for messages and docs)."""
    internal = {
        "map_get",
        "list_get",
        "try_list_get",
        "field",
        "interval_add",
        "subscript",
        "neg",
        "case",
        "is_null",
        "is_not_null",
        "is_true",
        "is_not_true",
        "is_false",
        "is_not_false",
        "in",
        "not_in",
        "like",
        "not_like",
        "ilike",
        "not_ilike",
        "distinct",
        "not_distinct",
        "and",
        "or",
        "not",
        "cast",
        "try_cast",
    }
    return sorted(n for n in FUNCTIONS if n.isidentifier() and n not in internal)
