"""What a write may store into a column: the one rule of every write path, Python's and Spark's.

Rows written into a table (``append``, ``overwrite``, a merge's source, a Spark DataFrame)
keep their values: a column's data is stored as the table's type only when every value
converts to it exactly (docs/format.md, "Types on write"):

- the same type, or a lossless widening: a wider integer (signed, or unsigned into a wider
  signed one), a wider float, an integer into a float whose mantissa holds it (int8/int16
  into float32, int32 into float64) or into a decimal with room for its digits, a decimal
  into one with at least its integer digits and its scale, date32 into date64 or a
  timestamp without time zone, a timestamp (or time) into a finer unit;
- string, large_string and string_view alike, binary alike; dictionary-encoded values by
  their value type; a null-typed column into any column (its nulls checked like any
  other's); structs field by field by name (a nullable field the data lacks is null),
  lists, large lists and maps by their elements, keys and values;
- a value-checked narrowing: a timestamp (or time) into a coarser unit, date64 into
  date32, binary into fixed-size binary: accepted when no value loses anything (pandas
  holds nanoseconds, tables store microseconds: whole microseconds are accepted, a value
  with nanoseconds is refused).

Anything else, a string of digits into an integer column, an integer into a string or
boolean column, a boolean into a number, an integer into a timestamp, a wider integer or
float into a narrower one, is refused with ``SchemaMismatch`` naming the column, both types
and how to cast, before anything is written. ``cast="safe"`` (pyarrow's name for the same:
``pyarrow.compute.cast(..., safe=True)``) converts what pyarrow's safe cast converts instead,
and refuses a value that does not convert. (deltalake's ``safe_cast`` flag is not the same
thing: there, ``False`` turns a value that does not convert into a null; Lamina never does.)

An update's ``set`` values and a merge clause's explicit values are SQL assignments (``qty +
1`` is an int64 expression for an int32 column): there a number may be stored into any
numeric column when the value converts (pyarrow's safe cast: a value out of range or a
fraction into an integer is refused), as Spark's ANSI store assignment does; every other
pair follows the rule.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lamina.errors import InvalidArgument, SchemaMismatch

# What ``fit`` says of a (data type, table type) pair.
WIDEN = "widen"  # every value converts exactly (the same type included)
CHECK = "check"  # a value converts exactly or not: each is checked
# None: refused

CAST_MODES = (None, "safe")

# Integer types narrowest first: what a column of one may widen to (schema evolution).
_SIGNED = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
# Decimal digits an integer type's values take (its largest magnitude).
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}
_UINT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
# Bits a float's significand holds exactly.
_MANTISSA = {16: 11, 32: 24, 64: 53}
_UNITS = ("s", "ms", "us", "ns")


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether a column's type may change from ``old`` to ``new`` (schema evolution), the way
    Iceberg allows it: a wider integer or float, a decimal with more precision and the same
    scale, a date to a timestamp without time zone. Every such change is also one ``fit``
    calls lossless: old files' values read as the new type exactly."""
    if old.equals(new):
        return True
    for ladder in (_SIGNED, _UNSIGNED):
        if old in ladder and new in ladder:
            return ladder.index(new) > ladder.index(old)
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return new.bit_width > old.bit_width
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale == old.scale and new.precision > old.precision and new.bit_width >= old.bit_width
    if pa.types.is_date32(old) and pa.types.is_timestamp(new):
        return new.tz is None
    return False


def check_cast_mode(cast: Any) -> str | None:
    """``cast`` if it is one of ``CAST_MODES``, else InvalidArgument."""
    if cast not in CAST_MODES:
        raise InvalidArgument(
            f"cast must be None (lossless widening only: docs/format.md, 'Types on write') or 'safe' "
            f"(pyarrow's safe casts), not {cast!r}"
        )
    return cast


def _weakest(*fits: str | None) -> str | None:
    if None in fits:
        return None
    return CHECK if CHECK in fits else WIDEN


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _integer_bits(t: pa.DataType) -> tuple[bool, int] | None:
    """(signed, bit width) of an integer type."""
    return (pa.types.is_signed_integer(t), t.bit_width) if pa.types.is_integer(t) else None


def _integer_fit(source: pa.DataType, target: pa.DataType) -> str | None:
    src, dst = _integer_bits(source), _integer_bits(target)
    assert src is not None
    signed, bits = src
    magnitude = bits - 1 if signed else bits  # bits of the largest magnitude
    if dst is not None:
        dst_signed, dst_bits = dst
        if signed and not dst_signed:
            return None
        return WIDEN if (dst_bits if not dst_signed else dst_bits - 1) >= magnitude else None
    if pa.types.is_floating(target):
        return WIDEN if _MANTISSA[target.bit_width] >= magnitude else None
    if pa.types.is_decimal(target):
        digits = (_INT_DIGITS if signed else _UINT_DIGITS)[bits]
        return WIDEN if target.precision - target.scale >= digits else None
    return None


def _unit_fit(source: str, target: str) -> str:
    return WIDEN if _UNITS.index(target) >= _UNITS.index(source) else CHECK


def fit(source: pa.DataType, target: pa.DataType, *, structs_by_name: bool = True) -> str | None:
    """Whether data of type ``source`` may be stored in a column of type ``target``: WIDEN
    (every value converts exactly), CHECK (when each value does, checked), or None (refused).
    ``structs_by_name=False``: a struct's fields must be the target's, in its order (Spark casts
    structs by position)."""
    if pa.types.is_dictionary(source):
        source = source.value_type
    if pa.types.is_null(source) or source.equals(target):
        return WIDEN
    if _is_string(source):
        return WIDEN if _is_string(target) else None
    if _is_binary(source) or pa.types.is_fixed_size_binary(source):
        if _is_binary(target):
            return WIDEN
        return CHECK if pa.types.is_fixed_size_binary(target) else None
    if pa.types.is_integer(source):
        return _integer_fit(source, target)
    if pa.types.is_floating(source):
        return WIDEN if pa.types.is_floating(target) and target.bit_width >= source.bit_width else None
    if pa.types.is_decimal(source):
        if not pa.types.is_decimal(target):
            return None
        return (
            WIDEN
            if target.scale >= source.scale and target.precision - target.scale >= source.precision - source.scale
            else None
        )
    if pa.types.is_date(source):
        if pa.types.is_date(target):
            return WIDEN if pa.types.is_date64(target) else CHECK  # date64 holds milliseconds
        return WIDEN if pa.types.is_timestamp(target) and target.tz is None else None
    if pa.types.is_timestamp(source):
        # A zone-aware timestamp is an instant (stored as UTC): any zone into any zone; a
        # wall-clock time (no zone) is another kind of value.
        if not pa.types.is_timestamp(target) or (source.tz is None) != (target.tz is None):
            return None
        return _unit_fit(source.unit, target.unit)
    if pa.types.is_time(source):
        return _unit_fit(source.unit, target.unit) if pa.types.is_time(target) else None
    if pa.types.is_struct(source):
        return _struct_fit(source, target, structs_by_name)
    if _is_list(source):
        if not (pa.types.is_list(target) or pa.types.is_large_list(target)):
            return None
        return fit(source.value_type, target.value_type, structs_by_name=structs_by_name)
    if pa.types.is_map(source):
        if not pa.types.is_map(target):
            return None
        return _weakest(
            fit(source.key_type, target.key_type, structs_by_name=structs_by_name),
            fit(source.item_type, target.item_type, structs_by_name=structs_by_name),
        )
    return None


def _struct_fit(source: pa.DataType, target: pa.DataType, by_name: bool) -> str | None:
    if not pa.types.is_struct(target):
        return None
    mine = {f.name: f for f in target}
    theirs = [f.name for f in source]
    if len(set(theirs)) != len(theirs) or any(n not in mine for n in theirs):
        return None
    if not by_name and theirs != [f.name for f in target]:
        return None
    missing = [f for f in target if f.name not in set(theirs)]
    if any(not f.nullable for f in missing):
        return None
    return _weakest(WIDEN, *(fit(f.type, mine[f.name].type, structs_by_name=by_name) for f in source))


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def assignment_fit(source: pa.DataType, target: pa.DataType) -> str | None:
    """``fit`` for a SQL assignment (an update's or a merge clause's value): a number into any
    numeric column is CHECK at least."""
    got = fit(source, target)
    if got is None and _numeric(source.value_type if pa.types.is_dictionary(source) else source) and _numeric(target):
        return CHECK
    return got


def type_expr(t: pa.DataType, column: str) -> str:
    """``t`` as the pyarrow expression that makes it (for messages): the table column
    ``column``'s type for a nested one."""
    simple = {
        "bool": "pa.bool_()",
        "float": "pa.float32()",
        "double": "pa.float64()",
        "halffloat": "pa.float16()",
        "date32[day]": "pa.date32()",
        "date64[ms]": "pa.date64()",
    }
    s = str(t)
    if s in simple:
        return simple[s]
    if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t):
        return f"pa.{s}()"
    if pa.types.is_timestamp(t):
        return f"pa.timestamp({t.unit!r}" + (f", tz={t.tz!r})" if t.tz is not None else ")")
    if pa.types.is_decimal(t):
        return f"pa.decimal128({t.precision}, {t.scale})"
    return f"table.schema.field({column!r}).type"


def cast_hint(column: str, target: pa.DataType) -> str:
    """How to make a refused column fit (for messages)."""
    return (
        f"cast it first (pyarrow.compute.cast(data[{column!r}], {type_expr(target, column)}), or pandas' astype), "
        "or pass cast='safe' to convert what pyarrow's safe cast converts"
    )


def widen_hint(column: str, source: pa.DataType, target: pa.DataType) -> str:
    """How to widen the column instead, where its type may widen to the data's ('' if not)."""
    if pa.types.is_nested(target) or not widens(target, source):
        return ""
    return (
        f"; or widen the column first (table.update_schema().update_column({column!r}, {type_expr(source, column)})), "
        "or let schema_mode='merge' widen it (table property schema.type-widening.enabled=true)"
    )


def mismatch(column: str, source: pa.DataType, target: pa.DataType) -> str:
    """Why a column whose type the rule refuses is refused, and how to cast (or widen) it."""
    return (
        f"column {column!r} is {source} in the data, the table has {target}: only a lossless widening is "
        f"stored as it is (docs/format.md, 'Types on write'); {cast_hint(column, target)}"
        + widen_hint(column, source, target)
    )


def store(
    col: pa.Array | pa.ChunkedArray,
    target: pa.DataType,
    column: str,
    *,
    cast: str | None = None,
    assignment: bool = False,
) -> pa.Array | pa.ChunkedArray:
    """``col`` as type ``target`` by the rule (``assignment``: a SQL assignment's, see the module
    docstring; ``cast="safe"``: pyarrow's safe cast), or SchemaMismatch naming ``column``."""
    if col.type.equals(target):
        return col
    how = (assignment_fit if assignment else fit)(col.type, target)
    if how is None and cast is None:
        raise SchemaMismatch(mismatch(column, col.type, target) + "; nothing was written")
    try:
        return col.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        if how is None:  # cast="safe"
            why = f"cast='safe' cannot convert {'a value' if isinstance(e, pa.ArrowInvalid) else 'it'} ({e})"
        else:
            why = f"a value does not convert exactly ({e})"
            if pa.types.is_temporal(target):  # a finer unit: what to drop is the part the table cannot hold
                why += (
                    f"; truncate the values first (pyarrow.compute.cast(data[{column!r}], "
                    f"{type_expr(target, column)}, safe=False))"
                )
        raise SchemaMismatch(
            f"column {column!r} is {col.type} in the data, the table has {target}: {why}; nothing was written"
        ) from None
