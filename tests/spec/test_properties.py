"""lamina.spec.properties: every table property's default, parser and checks; the readers
that go through it; and that no other module spells a property key or documents too few."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.commit.committer import CommitOptions
from lamina.errors import CorruptMetadata, InvalidArgument
from lamina.manifest.tree import TreeConfig
from lamina.spec.properties import (
    Property,
    TableProperties,
    WriterProperties,
    check_properties,
)
from lamina.spec.slot import slot_chunk_size

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lamina"
REGISTERED = TableProperties.all()
KEYS = {p.key for p in REGISTERED}
SCHEMA = pa.schema([("id", pa.int64())])


def test_the_registry_holds_every_constant_once():
    constants = [v for k, v in vars(TableProperties).items() if k.isupper()]
    assert all(isinstance(c, Property) for c in constants)
    assert len(REGISTERED) == len(constants) == len(KEYS) == 29
    # the constant's name is its key spelled as a name: write.max-rows-per-file -> WRITE_MAX_ROWS_PER_FILE
    for name, prop in vars(TableProperties).items():
        if isinstance(prop, Property):
            assert name == re.sub(r"[.-]", "_", prop.key).upper()


@pytest.mark.parametrize("prop", REGISTERED, ids=lambda p: p.key)
def test_every_default_is_a_value_its_property_accepts(prop):
    assert prop.get({}) == prop.default
    assert prop.get({"other.key": "x"}) == prop.default
    if prop.default is None:  # unset turns the feature off; there is no text for it
        assert prop.default_text is None
        return
    assert prop.problem(prop.default_text) is None
    assert prop.parse(prop.default_text) == prop.default
    assert prop.get({prop.key: prop.default_text}) == prop.default


def test_a_table_may_set_every_property_to_its_default():
    defaults = {p.key: p.default_text for p in REGISTERED if p.default_text is not None}
    check_properties(defaults)
    assert WriterProperties.from_properties(defaults) == WriterProperties()
    assert CommitOptions.from_properties(defaults) == CommitOptions()
    assert TreeConfig.from_properties(defaults) == TreeConfig()


def _bad_values(prop: Property) -> list[str]:
    """Texts that property's reader cannot use, by kind."""
    if prop.choices:
        return ["bogus", "", prop.choices[0] + " "]
    if prop.expects.startswith("an integer"):
        return ["abc", "1.5", "1e6", "", str(int(prop.minimum) - 1)]
    if prop.expects.startswith("a number"):
        return ["abc", "nan", "inf", "-inf", str(prop.minimum - 0.5)]
    if prop.key == TableProperties.WRITE_METADATA_METRICS_DEFAULT.key:  # a statistics mode
        return ["bogus", "", "truncate(0)", "truncate(x)", "full(16)"]
    return []  # write.sort-order: any text is a list of names (checked against the schema by compaction)


BAD = [(p, raw) for p in REGISTERED for raw in _bad_values(p)]


def test_every_property_but_the_sort_order_has_bad_values_to_refuse():
    assert {p.key for p, _ in BAD} == KEYS - {TableProperties.WRITE_SORT_ORDER.key}


@pytest.mark.parametrize("prop, raw", BAD, ids=[f"{p.key}={raw!r}" for p, raw in BAD])
def test_a_bad_value_is_refused_naming_the_property(prop, raw):
    with pytest.raises(InvalidArgument) as raised:
        check_properties({"user.note": "kept", prop.key: raw})
    assert f"{prop.key}={raw!r} (give {prop.expects})" in str(raised.value)
    assert "user.note" not in str(raised.value)
    # a table whose metadata holds it anyway (written before the check): its reader refuses it too
    with pytest.raises(InvalidArgument, match=re.escape(f"table property {prop.key}={raw!r} cannot be used")):
        prop.get({prop.key: raw})


def test_every_bad_value_is_named_at_once_and_no_table_is_created(tmp_path):
    bad = {p.key: _bad_values(p)[0] for p in REGISTERED if _bad_values(p)}
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidArgument, match="properties that cannot be used") as raised:
        lamina.create_table(uri, SCHEMA, properties={**bad, "write.sort-order": "id"})
    message = str(raised.value)
    assert [key for key in KEYS if f"{key}=" in message] == [key for key in KEYS if key in bad]
    assert "Nothing was created" in message and not os.path.exists(uri)


@pytest.mark.parametrize(("prop", "low", "high"), [
    (TableProperties.MANIFEST_INLINE_MAX_FILES, "-1", "0"),
    (TableProperties.MANIFEST_MERGE_MIN_LEAVES, "1", "2"),
    (TableProperties.COMMIT_RETRY_MAX_SECONDS, "-0.001", "0"),
])
def test_the_minimum_is_inclusive(prop, low, high):
    assert prop.problem(low) is not None and prop.problem(high) is None


def test_values_are_parsed_as_their_readers_need_them():
    p = TableProperties
    props = {
        p.WRITE_MAX_ROWS_PER_FILE.key: " 25 ", p.WRITE_PARQUET_COMPRESSION.key: "ZSTD",
        p.WRITE_DELETE_MODE.key: "copy-on-write", p.WRITE_SORT_ORDER.key: " ts, id ,",
        p.WRITE_PARQUET_INTEGER_ENCODING.key: "PLAIN",
        p.MANIFEST_INLINE_MAX_FILES.key: "0", p.MANIFEST_LEAF_TARGET_FILES.key: "3", p.MANIFEST_MERGE_MIN_LEAVES.key: "2",
        p.COMMIT_RETRY_MAX_ATTEMPTS.key: "7", p.COMMIT_RETRY_MAX_SECONDS.key: "1.5",
        p.COMMIT_RETRY_BACKOFF_MIN_MS.key: "0", p.COMMIT_RETRY_BACKOFF_MAX_MS.key: "2e3",
    }
    check_properties(props)
    assert WriterProperties.from_properties(props) == WriterProperties(25, "zstd", "copy-on-write", ("ts", "id"), "plain")
    assert TreeConfig.from_properties(props) == TreeConfig(inline_max=0, leaf_target=3, merge_min_leaves=2)
    options = CommitOptions.from_properties(props)
    assert (options.max_attempts, options.max_seconds, options.backoff_min_ms, options.backoff_max_ms) == (7, 1.5, 0.0, 2000.0)
    assert slot_chunk_size({p.VERSION_SLOT_CHUNK_SIZE.key: "2"}) == 2


def test_a_slot_chunk_size_that_cannot_be_used_is_corrupt_metadata():
    """It is fixed at creation (where a bad one is refused): one found later was altered."""
    with pytest.raises(CorruptMetadata, match="version.slot-chunk-size='0'"):
        slot_chunk_size({TableProperties.VERSION_SLOT_CHUNK_SIZE.key: "0"})


def test_the_compression_property_reaches_every_data_file(tmp_path):
    """Every file is written with the codec; files of rows under write.parquet.small-file-bytes
    (in Arrow) without footer statistics, the others with them. 0: every file with them."""
    zstd = {TableProperties.WRITE_PARQUET_COMPRESSION.key: "zstd"}
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=zstd)
    t.append(pa.table({"id": list(range(100))}))  # 800 bytes
    t.append(pa.table({"id": list(range(40_000))}))  # 320,000 bytes: above the default 256 KiB
    every = lamina.create_table(str(tmp_path / "every"), SCHEMA, properties={**zstd, TableProperties.WRITE_PARQUET_SMALL_FILE_BYTES.key: "0"})
    every.append(pa.table({"id": list(range(10))}))

    def first_column(table, rows: int):
        files = table.inspect.files()
        (path,) = files.filter(pa.compute.equal(files.column("record_count"), rows)).column("path").to_pylist()
        c = pq.read_metadata(os.path.join(table.uri, path)).row_group(0).column(0)
        return c.compression, c.is_stats_set

    assert first_column(t, 100) == ("ZSTD", False)
    assert first_column(t, 40_000) == ("ZSTD", True)
    assert first_column(every, 10) == ("ZSTD", True)
    assert sorted(t.to_arrow().column("id").to_pylist()) == sorted([*range(100), *range(40_000)])


# -- no other module spells a key; the spec imports nothing above it; the docs list them all --


def _string_constants(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node


@pytest.mark.slow  # reads every module's source
def test_no_module_but_the_spec_spells_a_property_key():
    """Keys are read through TableProperties; a bare key elsewhere is a second definition."""
    found = sorted(
        (str(path.relative_to(ROOT)), node.lineno, node.value)
        for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "spec" / "properties.py"
        for node in _string_constants(path)
        if node.value in KEYS
    )
    assert found == [], "use the TableProperties constants:\n" + "\n".join(f"{p}:{line}: {key!r}" for p, line, key in found)


def test_the_spec_imports_nothing_above_it():
    allowed = ("lamina.spec", "lamina.errors", "lamina.timeutil")
    found = []
    for path in sorted((PACKAGE / "spec").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):  # function-level imports too
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            found += [f"{path.name}: {n}" for n in names if n.startswith("lamina") and not n.startswith(allowed)]
    assert found == []


def _documented_properties() -> dict[str, str]:
    """key -> default cell of the table in docs/configuration.md, section "Every property"."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("## Every property\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| \[`([^`]+)`\]\([^)]*\) \| ([^|]+) \|", section, flags=re.MULTILINE)
    return dict(rows)


def test_the_configuration_page_lists_every_property_with_its_default():
    documented = _documented_properties()
    # a key with a placeholder (a column's own statistics mode) is a family of keys, checked by its own reader
    assert {k for k in documented if "<" not in k} == KEYS
    assert "write.metadata.metrics.column.<col>" in documented
    for prop in REGISTERED:
        cell = documented[prop.key]
        if prop.default_text is None:
            assert "unset" in cell
        elif prop.default_text == "":
            assert "empty" in cell
        else:
            assert cell.startswith(f"`{prop.default_text}`"), (prop.key, cell)


def test_a_misspelt_key_in_a_lamina_namespace_is_refused_with_the_closest_key(tmp_path):
    with pytest.raises(InvalidArgument, match="did you mean 'row-lineage.enabled'") as raised:
        lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"row-lineage": "false", "owner": "me"})
    assert "'owner'" not in str(raised.value)  # keys outside Lamina's namespaces are the user's
    with pytest.raises(InvalidArgument, match="'write.max-row-per-file' is no Lamina table property"):
        lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"write.max-row-per-file": "10"})
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.json"))
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties={"owner": "me", "team.name": "x"})
    assert t.metadata.properties == {"owner": "me", "team.name": "x"}
