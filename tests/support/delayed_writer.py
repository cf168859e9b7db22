"""A writer whose version put lands late (held until the test releases it), and the row
tallies the commit-guarantee tests compare (rows tagged (writer, seq, i) by workers.batch)."""

from __future__ import annotations

import collections
import threading

import pyarrow as pa

from lamina.commit import VersionLog
from lamina.io import FileIO
from support.faults import DelayedPutsIO
from lamina.table.table import Table
from support import workers

# Tiny chunks freed as soon as expired: the harshest setting for a late writer.
FREEING = {"version.slot-chunk-size": "2", "expire.slot-retention-ms": "0"}


def rows_of(t: pa.Table) -> collections.Counter:
    d = t.select(["writer", "seq", "i"]).to_pydict()
    return collections.Counter(zip(d["writer"], d["seq"], d["i"]))


def want(*appends: tuple[int, int], rows: int = 2) -> collections.Counter:
    return collections.Counter((w, s, i) for w, s in appends for i in range(rows))


class DelayedWriter:
    """An append (or any ``action(table)`` that commits) whose version put is held until
    ``land()``; runs in its own thread with its own Table (opened now, so its base is the
    version current now)."""

    def __init__(self, uri: str, writer: int = 1, seq: int = 0, action=None, match=None) -> None:
        self.io = DelayedPutsIO(FileIO(uri), match)  # match: which puts (default: main's versions)
        log = VersionLog(self.io)
        self.table = Table(self.io, log, log.latest())
        self.base = self.table.version
        self.data = workers.batch(writer, seq, 2)
        self.action = action or (lambda table: table.append(self.data))
        self.version: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()
        self._thread.start()
        assert self._ready.wait(30)
        assert self.hold.arrived.wait(60), "the delayed writer never reached its put"

    def _run(self) -> None:
        self.hold = self.io.hold_next_put()
        self._ready.set()
        try:
            self.version = self.action(self.table).version  # the action's CommitResult
        except BaseException as e:  # noqa: BLE001 - reported by land()
            self.error = e

    def land(self) -> int:
        self.hold.release.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the delayed writer did not finish"
        if self.error is not None:
            raise self.error
        assert self.version is not None
        return self.version

