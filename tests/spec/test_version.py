"""The version manifest (lamina.spec.version): its JSON round trip; a damaged one (or a damaged
manifest under it) is a clear error, and older versions still read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import lamina
from lamina.errors import CorruptMetadata
from lamina.io import FileIO
from lamina.spec.layout import is_inline_root, new_inline_root_name, version_path
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema
from lamina.spec.version import VersionManifest

from support.sample import SCHEMA, batch


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=6,
)


@given(
    version=st.integers(0, 2**40),
    ts=st.integers(0, 2**45),
    op=st.text(min_size=1, max_size=12),
    summary=st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    props=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4),
    root=st.none() | st.text(min_size=1, max_size=30).filter(lambda r: not is_inline_root(r)),
    feats=st.lists(st.text(min_size=1, max_size=10), max_size=3),
    inline=st.none() | st.binary(min_size=1, max_size=40),
)
def test_version_manifest_json_round_trip(version, ts, op, summary, props, root, feats, inline):
    if inline is not None:
        root = new_inline_root_name()  # a carried root: named so, and its bytes with it
    vm = VersionManifest(
        version=version,
        parent_version=version - 1 if version else None,
        table_uuid="u-1",
        timestamp_ms=ts,
        operation=op,
        summary=summary,
        schema=Schema.from_arrow(SCHEMA),
        partition_spec=PartitionSpec(),
        properties=props,
        root_manifest=root,
        reader_features=tuple(feats),
        writer_features=tuple(feats),
        commit_id="abc",
        root_inline=inline,
    )
    assert VersionManifest.from_json(vm.to_json(), "x") == vm
    # The schema and spec are spliced in as text encoded once: the bytes are still exactly the
    # compact JSON of the whole object, keys in the documented order.
    assert vm.to_json() == json.dumps(json.loads(vm.to_json()), separators=(",", ":")).encode()
    assert list(json.loads(vm.to_json()))[:11] == [
        "format_version", "version", "parent_version", "table_uuid", "timestamp_ms", "operation", "summary",
        "schema", "partition_spec", "properties", "root_manifest",
    ]


def test_corrupt_and_truncated_metadata_is_a_clear_error(uri):
    # roots as files here (a damaged root a version manifest carries: tests/manifest/test_inline_roots.py)
    t = lamina.create_table(uri, SCHEMA, properties={"manifest.root-format": "arrow"})
    t.append(batch(0, 3))
    t.append(batch(3, 3))
    io = FileIO(uri)
    good = io.get(version_path(2))
    with open(io.local_path(version_path(2)), "wb") as f:
        f.write(good[: len(good) // 2])
    with pytest.raises(CorruptMetadata, match="corrupt or truncated"):
        lamina.open_table(uri)
    assert lamina.open_table(uri, version=1).scan().to_arrow().num_rows == 3
    with open(io.local_path(version_path(2)), "wb") as f:
        f.write(good)
    root = lamina.open_table(uri).metadata.root_manifest
    from lamina.manifest.files import clear_cache

    clear_cache()
    with open(io.local_path(root), "wb") as f:
        f.write(b"PAR1garbage")
    with pytest.raises(CorruptMetadata, match="manifest"):
        lamina.open_table(uri).scan().to_arrow()


def test_next_is_replace_and_keeps_what_was_derived_only_from_the_same_fields(uri):
    import dataclasses

    import pyarrow as pa

    from lamina.manifest.entries import manifest_schema_of

    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3))
    vm = t.metadata
    ms = manifest_schema_of(vm)
    same = vm.next(version=vm.version + 1, summary={"x": 1}, properties=vm.properties, schema=vm.schema)
    assert same == dataclasses.replace(vm, version=vm.version + 1, summary={"x": 1})
    assert manifest_schema_of(same) is ms  # nothing it derives from changed: kept
    wider = Schema.from_arrow(pa.schema([*SCHEMA, pa.field("extra", pa.int64())]))
    other = vm.next(schema=wider)
    assert manifest_schema_of(other) is not ms and "min_5" in manifest_schema_of(other).names
    policy = vm.next(properties={**vm.properties, "write.metadata.metrics.default": "none"})
    assert not any(n.startswith("min_") for n in manifest_schema_of(policy).names)
    with pytest.raises(TypeError, match="no field"):
        vm.next(verison=3)
