"""Field ids and physical names through schema changes (lamina.spec.schema_update), and the
schema's JSON form.

What makes evolution metadata-only rests on three invariants checked here on random
change sequences: a field keeps its id and physical name through renames, moves and
widenings; ids are never reused (not even after a drop); and no two fields of a schema,
nor a new field and any field ever dropped, share a physical name.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.errors import CorruptMetadata
from lamina.spec.schema import Schema
from lamina.spec.schema_update import (
    AddColumn, DropColumn, InvalidSchemaChange, MoveColumn, RenameColumn, UpdateColumn, apply_schema_changes, widens,
)

BASE = Schema.from_arrow(pa.schema([("a", pa.int8()), ("b", pa.float32()), ("s", pa.struct([("x", pa.int16())]))]))


def _fields(schema: Schema) -> dict[int, tuple[str, str]]:
    """field id -> (path, physical name), every depth."""
    return {f["field_id"]: (f["path"], f["physical_name"]) for f in schema.describe()}


@st.composite
def change_sequences(draw):
    """Random valid-or-not change sequences over BASE's names and a few new ones."""
    names = ["a", "b", "c", "d", "e"]
    ops = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["add", "drop", "rename", "move", "widen"]))
        n = draw(st.sampled_from(names))
        if kind == "add":
            ops.append(AddColumn(n, draw(st.sampled_from([pa.int32(), pa.string()]))))
        elif kind == "drop":
            ops.append(DropColumn(n))
        elif kind == "rename":
            ops.append(RenameColumn(n, draw(st.sampled_from(names))))
        elif kind == "move":
            ops.append(MoveColumn(n, ("first", None)))
        else:
            ops.append(UpdateColumn(n, draw(st.sampled_from([pa.int16(), pa.int64(), pa.float64()]))))
    return ops


@settings(max_examples=150, deadline=None)
@given(change_sequences())
def test_ids_and_physical_names_survive_any_sequence_of_changes(changes):
    schema, ever = BASE, dict(_fields(BASE))  # every (id -> physical name) ever seen
    for change in changes:
        try:
            new = apply_schema_changes(schema, [change])
        except InvalidSchemaChange:
            continue  # refused changes are checked elsewhere; the schema stays
        before, after = _fields(schema), _fields(new)
        for fid, (_, phys) in after.items():
            if fid in ever:
                assert ever[fid][1] == phys, "a field's physical name changed"
            else:
                assert fid > schema.last_column_id, f"field id {fid} reused"
                assert phys not in {p for _, p in ever.values()}, "a new field reuses a physical name"
                ever[fid] = after[fid]
        physical_top = [f["physical_name"] for f in new.describe() if f["depth"] == 0]
        assert len(set(physical_top)) == len(physical_top)
        assert new.last_column_id >= schema.last_column_id
        assert new.schema_id == schema.schema_id + 1
        # the JSON form is the whole schema
        again = Schema.from_json(new.to_json())
        assert again == new and again.last_column_id == new.last_column_id and _fields(again) == after
        assert set(before) - set(after) <= set(ever)
        schema = new


def test_a_dropped_name_added_again_is_a_new_column():
    dropped = apply_schema_changes(BASE, [DropColumn("a")])
    again = apply_schema_changes(dropped, [AddColumn("a", pa.int8())])
    old, new = BASE.field("a"), again.field("a")
    assert again.field_id("a") == BASE.last_column_id + 1 != BASE.field_id("a")
    assert again.physical_names["a"] != BASE.physical_names["a"] == "a"
    assert old.type == new.type


def test_rename_keeps_the_physical_name_and_renaming_back_clears_the_mapping():
    renamed = apply_schema_changes(BASE, [RenameColumn("s.x", "y"), RenameColumn("a", "z")])
    assert renamed.physical_names["z"] == "a" and renamed.has_column_mapping
    assert renamed.physical_arrow.field("s").type.field(0).name == "x"
    back = apply_schema_changes(renamed, [RenameColumn("s.y", "x"), RenameColumn("z", "a")])
    assert not back.has_column_mapping and back.physical_arrow == back.arrow


@pytest.mark.parametrize(
    "old,new,ok",
    [
        (pa.int8(), pa.int16(), True), (pa.int8(), pa.int64(), True), (pa.int64(), pa.int32(), False),
        (pa.uint8(), pa.uint32(), True), (pa.uint8(), pa.int16(), False),
        (pa.float32(), pa.float64(), True), (pa.float64(), pa.float32(), False), (pa.int32(), pa.float64(), False),
        (pa.decimal128(5, 2), pa.decimal128(9, 2), True), (pa.decimal128(5, 2), pa.decimal128(9, 3), False),
        (pa.decimal128(9, 2), pa.decimal128(5, 2), False),
        (pa.date32(), pa.timestamp("us"), True), (pa.date32(), pa.timestamp("us", "UTC"), False),
        (pa.string(), pa.binary(), False), (pa.int32(), pa.string(), False),
    ],
)
def test_widening_rules(old, new, ok):
    assert widens(old, new) is ok


def test_defaults_round_trip_through_json_for_every_primitive_kind():
    import datetime as dt
    import decimal

    values = [
        (pa.int32(), 7), (pa.float64(), 1.5), (pa.bool_(), True), (pa.string(), "x"), (pa.binary(), b"\x00\xff"),
        (pa.date32(), dt.date(2026, 1, 2)), (pa.timestamp("us"), dt.datetime(2026, 1, 2, 3, 4, 5)),
        (pa.decimal128(9, 2), decimal.Decimal("12.34")),
    ]
    schema = BASE
    for i, (t, v) in enumerate(values):
        schema = apply_schema_changes(schema, [AddColumn(f"c{i}", t, required=True, default=v)])
    again = Schema.from_json(schema.to_json())
    for i, (t, v) in enumerate(values):
        assert again.initial_defaults[f"c{i}"].as_py() == v
        assert again.write_defaults[f"c{i}"].type == t


def test_a_default_that_does_not_decode_is_corrupt_metadata():
    schema = apply_schema_changes(BASE, [AddColumn("d", pa.date32(), required=True, default="2026-01-02")])
    j = schema.to_json()
    j["fields"][-1]["initial_default"] = "not a date"
    with pytest.raises(CorruptMetadata, match="not a date"):
        Schema.from_json(j).initial_defaults
