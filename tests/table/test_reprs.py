"""What a notebook shows of the objects a Table hands out: one short line each, saying what
the object is (a tag's name, version and time; a version's number and size; a report's
counts), never the whole copy of a version manifest, a schema's field metadata or every
path a report lists."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import lamina
from lamina.commit import flush_hints
from lamina.maintenance import fsck

# A wide table, as the flights: a repr must not grow with its columns.
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))] + [(f"col_{i:02d}", pa.string()) for i in range(30)])
SHORT = 200  # characters
REPORT = 500  # a report's counts (a storage report has a dozen), whatever the table's size


@pytest.fixture
def table(tmp_path):
    uri = f"sqlite:///{tmp_path}/catalog.db"
    cat = lamina.load_catalog(uri)
    cat.create_namespace("ns")
    t = cat.create_table("ns.wide", SCHEMA, partition_by=["day(ts)"])
    day = datetime(2026, 1, 5, tzinfo=timezone.utc)
    for k in range(4):
        rows = {"id": pa.array(range(k * 10, k * 10 + 10), pa.int64()), "ts": [day + timedelta(days=k)] * 10}
        t.append(pa.table({**rows, **{f"col_{i:02d}": ["x"] * 10 for i in range(30)}}, schema=SCHEMA))
    t.delete("id < 3")
    yield t, cat
    cat.close()
    flush_hints()


def one_short_line(obj: object, limit: int = SHORT) -> str:
    text = repr(obj)
    assert "\n" not in text and len(text) <= limit, f"{type(obj).__name__}: {len(text)} characters: {text[:600]}"
    return text


def test_a_tag_is_its_name_version_and_times(table):
    t, _ = table
    tag = t.tags.create("eod-2026-01-05", 2, expires_at=timedelta(days=30))
    text = one_short_line(tag)
    committed = datetime.fromtimestamp(tag.version.timestamp_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    expires = datetime.fromtimestamp(tag.expires_at_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    assert text.startswith("Tag(name='eod-2026-01-05', version=2, ") and committed in text and f"expires={expires}" in text
    assert one_short_line(t.tags.get("eod-2026-01-05")) == text  # read back from its file
    assert [one_short_line(x) for x in t.tags.list()] == [text]


def test_a_branch_record_is_its_name_base_time_and_retention(table):
    t, _ = table
    b = t.branches.create("etl-2026-01-05", retain_last=3)
    text = one_short_line(b.branch_record)
    assert text.startswith(f"BranchRecord(name='etl-2026-01-05', base=main@{b.branch_record.base_version}, ") and "retain_last=3" in text
    assert [one_short_line(r) for r in t.branches.list()] == [text]


def test_a_version_is_its_number_operation_time_and_size(table):
    t, _ = table
    vm = t.metadata
    text = one_short_line(vm)
    assert text.startswith(f"VersionManifest(version={vm.version}, parent_version={vm.parent_version}, operation='delete', ")
    assert f"files={vm.summary['total-files']}, records={vm.summary['total-records']}" in text
    schema = one_short_line(vm.schema)
    assert "id: int64, ts: timestamp[us, tz=UTC], col_00: string" in schema and schema.endswith(f"... {len(SCHEMA) - schema.count(': ')} more])")


def test_scans_plans_reports_and_catalog_entries_are_one_line(table):
    t, cat = table
    scan = t.scan(where="id >= 5", columns=["id", "ts"])
    assert one_short_line(scan) == f"Scan({t.uri!r}, version={t.version}, where='id >= 5', columns=['id', 'ts'])"
    plan = scan.plan()
    assert one_short_line(plan) == f"ScanPlan(files={len(plan)}, records={plan.record_count})"
    for k in range(4):
        t.tags.create(f"t{k}", k + 1)
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(0), dry_run=True)
    assert len(rep.expired_versions) == t.version and f"expired_versions=<{t.version} items>" in one_short_line(rep, REPORT)
    one_short_line(t.maintenance.remove_orphans(dry_run=True), REPORT)
    one_short_line(fsck(t), REPORT)
    one_short_line(t.maintenance.compact(), REPORT)
    assert "holders=<5 items>" in one_short_line(t.maintenance.storage(), REPORT)  # older versions and four tags
    info = one_short_line(cat.table_info("ns.wide"), REPORT)  # (a long tmp location)
    assert "schema_json" not in info and "location=" in info
