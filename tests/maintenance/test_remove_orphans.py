"""Orphan cleanup through Table.remove_orphans: young files and files of writes in flight are spared."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from lamina.commit import flush_hints
from lamina.errors import InvalidArgument
from lamina.maintenance import fsck
from lamina.data.inflight import inflight, new_write_id

from support.grouped import NOW, batch, ids, new_table


@pytest.fixture
def table(tmp_path):
    yield new_table(tmp_path)
    flush_hints()


def test_remove_orphans_spares_young_and_in_flight_files(table):
    table.append(batch([1]))
    data_dir = os.path.join(table.uri, "data")
    orphan = os.path.join(data_dir, "deadbeefdeadbeef-000000000000.parquet")
    with open(orphan, "wb") as f:
        f.write(b"x" * 10)
    wid = new_write_id()
    running = os.path.join(data_dir, f"spark-{wid}", "part-0.parquet")
    os.makedirs(os.path.dirname(running))
    with open(running, "wb") as f:
        f.write(b"y")
    with pytest.raises(InvalidArgument, match="shorter than"):
        table.maintenance.remove_orphans(timedelta(hours=1))
    young = table.maintenance.remove_orphans()  # default: older than 3 days
    assert young.orphans == [] and young.kept_young == 2
    with inflight(table.io, wid):
        rep = table.maintenance.remove_orphans(NOW, allow_short_age=True)
        assert rep.orphans == ["data/deadbeefdeadbeef-000000000000.parquet"] and rep.kept_in_flight == 1
        assert not os.path.exists(orphan) and os.path.exists(running)
    rep = table.maintenance.remove_orphans(NOW, allow_short_age=True)  # the write finished without committing
    assert rep.orphans == [f"data/spark-{wid}/part-0.parquet"]
    assert ids(table.to_arrow()) == [1] and fsck(table).ok
