"""The Iceberg view of a table on S3 (a local moto server): written through the object store's
conditional puts, read by pyiceberg with its S3 file IO, expired and checked like on disk."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pyarrow as pa
import pytest

import lamina
from lamina.iceberg import gc, read_head
from lamina.maintenance import fsck
from support import BUCKET

StaticTable = pytest.importorskip("pyiceberg.table", reason="pyiceberg is in the test extra").StaticTable


def test_the_view_of_an_s3_table_reads_in_pyiceberg(s3):
    uri = f"s3://{BUCKET}/iceberg-{uuid.uuid4().hex[:8]}/t"
    opts = s3.storage_options
    t = lamina.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.string())]),
                            properties={"iceberg.enabled": "true"}, storage_options=opts)
    for i in range(4):
        t.append(pa.table({"id": [2 * i, 2 * i + 1], "v": ["a", "b"]}))
    t.delete("id = 3")
    t.tags.create("before")
    t.update("id = 0", {"v": "'z'"})
    head = read_head(t.io)
    assert head.metadata["location"] == uri
    props = {"s3.endpoint": opts["endpoint"], "s3.access-key-id": opts["access_key_id"],
             "s3.secret-access-key": opts["secret_access_key"], "s3.region": opts.get("region", "us-east-1")}
    view = StaticTable.from_metadata(f"{uri}/{head.path}", properties=props)
    got = view.scan().to_arrow().sort_by("id").to_pylist()
    assert got == t.to_arrow().sort_by("id").to_pylist()
    tagged = view.scan(snapshot_id=view.metadata.refs["before"].snapshot_id).to_arrow().sort_by("id")
    assert tagged.to_pylist() == t.scan(version="before").to_arrow().sort_by("id").to_pylist()
    t.maintenance.expire_versions(retain_last=2, older_than=timedelta(0), reader_grace=timedelta(0))
    assert not gc.referenced(t.io).missing and fsck(t).ok and not fsck(t).iceberg
