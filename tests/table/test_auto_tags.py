"""Automatic tags (a commit hook): one a day, the oldest dropped past tag.auto-retain-max."""

from __future__ import annotations

from datetime import datetime, timezone

import lamina

from support.grouped import SCHEMA, batch, ids


def test_automatic_daily_tags_with_retention(tmp_path, monkeypatch):
    day = datetime(2026, 11, 1, 12, tzinfo=timezone.utc).timestamp()
    clock = {"now": day - 3600}
    monkeypatch.setattr("lamina.commit.committer.time.time", lambda: clock["now"])  # the commit clock
    t = lamina.create_table(str(tmp_path / "auto"), SCHEMA, properties={"tag.auto-create": "daily", "tag.auto-retain-max": 2})
    for d in range(4):  # two commits a day for four days
        for k in range(2):
            clock["now"] = day + d * 86400 + k * 60
            t.append(batch([d * 10 + k]))
    names = [tg.name for tg in t.tags.list()]
    assert names == ["2026-11-02", "2026-11-03"]  # 11-01 expired by retain-max; 11-04 not over yet
    assert all(tg.automatic for tg in t.tags.list())
    assert ids(t.scan(version="2026-11-03").to_arrow()) == [0, 1, 10, 11, 20, 21]
