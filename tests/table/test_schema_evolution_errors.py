"""Bad schema changes: each gets a typed error naming what is wrong and
commits nothing: the table's version and every file under its root stay as they were.
Also corrupt schemas in version manifests (CorruptMetadata when the version is opened) and
the column-mapping reader feature (a reader that does not know it refuses the table)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.errors import CorruptMetadata, InvalidArgument, SchemaMismatch, UnsupportedFeature
from lamina.io import FileIO
from lamina.spec import features
from lamina.spec.layout import version_path
from lamina.spec.schema_update import InvalidSchemaChange

SCHEMA = pa.schema([
    ("id", pa.int64()), ("a", pa.int32()), ("d", pa.date32()), ("f", pa.float64()),
    ("s", pa.struct([("x", pa.int32()), ("y", pa.string())])), ("s.x", pa.int32()), ("m", pa.decimal128(6, 2)),
])


def make(tmp_path, **kwargs) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, **kwargs)
    t.append(pa.table({"id": [1], "a": pa.array([2], pa.int32()), "d": pa.array([0], pa.int32()).cast(pa.date32())}))
    return t


def files_of(t: lamina.Table) -> dict[str, int]:
    root = t.io.local_path("")
    return {
        os.path.relpath(os.path.join(d, f), root): os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(root) for f in fs
    }


def assert_refused(t: lamina.Table, change, error=InvalidSchemaChange, match: str | None = None) -> None:
    """``change(t)`` raises ``error`` (matching ``match``) and commits nothing."""
    flush_hints()  # the latest-version hint of earlier commits is written in the background
    version, files = t.version, files_of(t)
    with pytest.raises(error, match=match):
        change(t)
    assert lamina.open_table(t.io.uri).version == version
    flush_hints()
    assert files_of(t) == files


BAD_CHANGES = {
    "unknown column": (lambda u: u.drop_column("nope"), "no column 'nope'"),
    "unknown nested field": (lambda u: u.rename_column(("s", "nope"), "q"), "no column 's.nope'"),
    "unknown type target": (lambda u: u.update_column("nope", pa.int64()), "no column 'nope'"),
    "unknown move reference": (lambda u: u.move_column("a", after="nope"), "no column 'nope'"),
    "narrowing int": (lambda u: u.update_column("a", pa.int16()), "only widening"),
    "narrowing float": (lambda u: u.update_column("f", pa.float32()), "only widening"),
    "narrowing decimal": (lambda u: u.update_column("m", pa.decimal128(5, 2)), "only widening"),
    "decimal scale change": (lambda u: u.update_column("m", pa.decimal128(10, 3)), "only widening"),
    "unrelated type": (lambda u: u.update_column("a", pa.string()), "only widening"),
    "int to float": (lambda u: u.update_column("a", pa.float64()), "only widening"),
    "date to timestamp with zone": (lambda u: u.update_column("d", pa.timestamp("us", "UTC")), "only widening"),
    "struct to primitive": (lambda u: u.update_column("s", pa.int32()), "fields one by one"),
    "optional to required": (lambda u: u.update_column("a", nullable=False), "may hold nulls"),
    "required without default": (lambda u: u.add_column("r", pa.int32(), required=True), "without a default"),
    "duplicate top-level name": (lambda u: u.add_column("a", pa.int64()), "already exists"),
    "duplicate nested name": (lambda u: u.add_column(("s", "y"), pa.int64()), "already exists"),
    "rename onto a name": (lambda u: u.rename_column("a", "id"), "already exists"),
    "reserved name": (lambda u: u.add_column("_row_id", pa.int64()), "reserved"),
    "reserved prefix": (lambda u: u.add_column("__lamina_x", pa.int64()), "reserved"),
    "rename to reserved": (lambda u: u.rename_column("a", "_change_type"), "reserved"),
    "ambiguous dotted path drop": (lambda u: u.drop_column("s.x"), r"ambiguous.*\('s', 'x'\).*\('s.x',\)"),
    "ambiguous dotted path widen": (lambda u: u.update_column("s.x", pa.int64()), "ambiguous"),
    "ambiguous parent of an add": (lambda u: u.add_column("s.x.z", pa.int8()), "ambiguous"),
    "default that does not fit": (lambda u: u.add_column("r", pa.int8(), default=1000), "does not fit"),
    "nested default": (lambda u: u.add_column(("s", "r"), pa.int8(), default=1), "top-level columns only"),
    "last column of a struct": (lambda u: u.drop_column(("s", "y")).drop_column(("s", "x")), "last field"),
    "move after itself": (lambda u: u.move_column("a", after="a"), "after itself"),
    "move out of its struct": (lambda u: u.move_column(("s", "x"), after="a"), "not in the same struct"),
    "not an Arrow type": (lambda u: u.add_column("q", "int"), "pyarrow.DataType"),
}


@pytest.mark.parametrize("case", sorted(BAD_CHANGES))
def test_bad_schema_change_is_refused_and_commits_nothing(tmp_path, case):
    change, match = BAD_CHANGES[case]
    t = make(tmp_path)
    assert_refused(t, lambda t: change(t.update_schema()).commit(), match=match)
    # in a with block, good changes before the bad one are not committed either
    def in_block(t):
        with t.update_schema() as u:
            u.add_column("fine", pa.int8())
            change(u)
    assert_refused(t, in_block, match=match)
    # nor in a transaction, with data
    def in_tx(t):
        with t.transaction() as tx:
            tx.append(pa.table({"id": [7]}))
            change(tx.update_schema())
    assert_refused(t, in_tx, match=match)


@pytest.mark.parametrize("partition_by, properties, change, match", [
    ("day(d)", None, lambda u: u.drop_column("d"), "partition field 'd_day'"),
    ("day(d)", None, lambda u: u.update_column("d", pa.timestamp("us")), "partition field 'd_day'"),
    ("a", None, lambda u: u.drop_column("a"), "partition field 'a'"),
    ("bucket(4, id)", None, lambda u: u.rename_column("id", "key").drop_column("key"), "partition field"),
    (None, {"write.sort-order": "f"}, lambda u: u.drop_column("f"), "sort order"),
    (None, {"write.sort-order": "d,a"}, lambda u: u.update_column("d", pa.timestamp("us")), "sort order"),
])
def test_columns_a_partition_field_or_the_sort_order_uses_are_protected(tmp_path, partition_by, properties, change, match):
    t = make(tmp_path, partition_by=partition_by, properties=properties)
    assert_refused(t, lambda t: change(t.update_schema()).commit(), match=match)


def test_integer_widening_of_a_partition_source_and_renaming_a_sort_column_are_allowed(tmp_path):
    t = make(tmp_path, partition_by="a", properties={"write.sort-order": "d"})
    t.update_schema().update_column("a", pa.int64()).rename_column("d", "day").commit()
    assert t.metadata.properties["write.sort-order"] == "day"
    t.append(pa.table({"id": [2], "a": [2**40]}))
    assert sorted(t.to_arrow(where="a >= 2").column("id").to_pylist()) == [1, 2]


def test_bad_schema_mode_writes_commit_nothing(tmp_path):
    t = make(tmp_path)
    assert_refused(t, lambda t: t.append(pa.table({"id": [2], "a": ["x"], "new": [1]}), schema_mode="merge"),
                   SchemaMismatch, "'a' is string in the data")
    assert_refused(t, lambda t: t.append(pa.table({"id": [2], "_row_id": [1]}), schema_mode="merge"), match="reserved")
    assert_refused(t, lambda t: t.append(pa.table({"id": [2]}), schema_mode="overwrite"), InvalidArgument, "schema_mode")
    assert_refused(t, lambda t: t.overwrite(pa.table({"id": [2]}), where="id = 2", schema_mode="overwrite"),
                   InvalidArgument, "drop where")
    assert_refused(t, lambda t: t.append(pa.table({"id": [2], "new": [1]})), SchemaMismatch, "schema_mode='merge'")


def _edit_latest(t: lamina.Table, edit) -> None:
    path = t.io.local_path(version_path(t.version))
    with open(path) as f:
        j = json.load(f)
    edit(j)
    with open(path, "w") as f:
        json.dump(j, f)


def _evolved(tmp_path) -> lamina.Table:
    t = make(tmp_path)
    t.update_schema().rename_column("a", "b").add_column("c", pa.int8(), default=3).commit()
    return t


CORRUPT_SCHEMAS = {
    "unknown type": lambda s: s["fields"][1].__setitem__("type", "int99"),
    "fields not a list": lambda s: s.__setitem__("fields", "abc"),
    "id not a number": lambda s: s["fields"][1].__setitem__("id", "x"),
    "no fields": lambda s: s.pop("fields"),
    "decimal without precision": lambda s: s["fields"][6].__setitem__("type", {"type": "decimal"}),
    "field id used twice": lambda s: s["fields"][1].__setitem__("id", s["fields"][0]["id"]),
    "nested field id used twice": lambda s: s["fields"][4]["type"]["fields"][0].__setitem__("id", s["fields"][0]["id"]),
    "two columns of one name": lambda s: s["fields"][1].__setitem__("name", "id"),
    "two columns of one physical name": lambda s: s["fields"][-1].__setitem__("physical_name", "a"),
    "default of the wrong type": lambda s: s["fields"][-1].__setitem__("initial_default", "zz"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT_SCHEMAS))
def test_corrupt_schema_in_a_version_manifest_is_corrupt_metadata(tmp_path, case):
    t = _evolved(tmp_path)
    _edit_latest(t, lambda j: CORRUPT_SCHEMAS[case](j["schema"]))
    with pytest.raises(CorruptMetadata, match=r"versions/.*schema|schema is malformed|column default|column type"):
        lamina.open_table(t.io.uri).to_arrow()
    # the version before reads as it did
    assert lamina.open_table(t.io.uri, version=t.version - 1).to_arrow().column("a").to_pylist() == [2]


def test_column_mapping_is_a_reader_feature_that_an_unaware_reader_refuses(tmp_path, monkeypatch):
    t = make(tmp_path)
    plain = t.version
    t.update_schema().update_column("a", pa.int64()).commit()  # a widening alone maps nothing
    assert "column-mapping" not in t.metadata.reader_features
    t.update_schema().rename_column("a", "b").commit()
    assert "column-mapping" in t.metadata.reader_features and "column-mapping" in t.metadata.writer_features
    monkeypatch.setattr(features, "KNOWN_READER_FEATURES", features.KNOWN_READER_FEATURES - {"column-mapping"})
    with pytest.raises(UnsupportedFeature, match="column-mapping"):
        lamina.open_table(t.io.uri)
    # versions from before the rename stay readable to it
    assert lamina.open_table(t.io.uri, version=plain).to_arrow().column("a").to_pylist() == [2]


def test_unknown_reader_feature_on_an_evolved_table_is_refused(tmp_path):
    t = _evolved(tmp_path)
    io = FileIO(t.io.uri)
    _edit_latest(t, lambda j: j.__setitem__("reader_features", [*j["reader_features"], "column-mapping-v9"]))
    with pytest.raises(UnsupportedFeature, match="column-mapping-v9"):
        lamina.open_table(io.uri)
