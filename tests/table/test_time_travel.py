"""Time travel: by version and by timestamp (commit timestamps that only go up; a binary
search over the versions, no listing), and its errors."""

from __future__ import annotations

import pytest

import lamina
from lamina.errors import InvalidArgument, VersionNotFound

from support.sample import SCHEMA, batch


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def test_time_travel_errors(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 1))
    with pytest.raises(VersionNotFound, match="version 7"):
        t.scan(version=7)
    with pytest.raises(VersionNotFound):
        t.scan(timestamp=0)
    with pytest.raises(InvalidArgument):
        t.scan(version=1, timestamp=1)


def test_timestamps_monotonic_and_binary_search(uri, monkeypatch):
    import lamina.commit.committer as cm

    t = lamina.create_table(uri, SCHEMA)
    clock = [2_000_000_000.0]
    monkeypatch.setattr(cm.time, "time", lambda: clock[0])
    stamps = []
    for i in range(12):
        clock[0] += -5 if i == 6 else 1  # a clock that goes backwards once
        t.append(batch(i, 1))
        stamps.append(t.metadata.timestamp_ms)
    assert all(b > a for a, b in zip(stamps, stamps[1:]))
    loads = []
    real_load = t.log.load

    def counting(v, **kw):
        loads.append(v)
        return real_load(v, **kw)

    t2 = lamina.open_table(uri)
    t2.log.load = counting
    for i, ts in enumerate(stamps):
        loads.clear()
        assert t2.scan(timestamp=ts).version == i + 1
        assert len(loads) <= 6  # O(log n), no listing
    assert t2.scan(timestamp=stamps[3] + 0.5).version == 4
