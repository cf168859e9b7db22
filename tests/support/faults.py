"""A fault-injecting FileIO for tests: transient errors, lost responses, slow calls.

Wraps the real FileIO of a location (so the data really is on disk or in the
store) and, driven by a seeded random generator, makes calls fail:

- ``error``: the call raises StorageError and does nothing (a transient failure);
- ``lost``: a write is carried out, then raises StorageError as if the response
  was lost (the caller cannot tell it happened: the case commit ids resolve);
- ``retried``: a conditional create is carried out, then raises AlreadyExists, as when
  the store client retried a request whose first try had landed (S3 answers 412);
- ``slow``: the call is counted as slow (no sleeping: tests stay fast; the
  latency is what retries and timeouts would see, so it only feeds ``stats``).

Faults are injected into each store call, so ``put_new`` meets them once per attempt
(its ``_create_once``), as it would meet a real store's.

Used by the property tests over commits, compaction and expiry.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any, Callable, TypeVar

from lamina.errors import AlreadyExists, StorageError
from lamina.io.fileio import FileIO

T = TypeVar("T")

_CREATES = {"put_if_absent", "_create_once"}  # conditional: a retried request finds its own object
_WRITES = {"put", "put_in_place", "delete", "delete_many"} | _CREATES
_READS = {"get", "get_range", "exists", "size", "list", "list_names", "list_first_page"}


class FaultInjectingIO(FileIO):
    def __init__(self, inner: FileIO, *, seed: int = 0, error_rate: float = 0.05, lost_rate: float = 0.05,
                 slow_rate: float = 0.05, retried_rate: float = 0.0, only: set[str] | None = None) -> None:
        self.__dict__.update(inner.__dict__)  # same location, same store
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.error_rate, self.lost_rate, self.slow_rate = error_rate, lost_rate, slow_rate
        self.retried_rate = retried_rate
        self.only = only
        self.enabled = True
        self.stats: Counter[str] = Counter()

    def _roll(self, op: str) -> str | None:
        if not self.enabled or (self.only is not None and op not in self.only):
            return None
        with self._lock:
            x = self._rng.random()
        if x < self.error_rate:
            return "error"
        if op in _WRITES and x < self.error_rate + self.lost_rate:
            return "lost"
        if op in _CREATES and x < self.error_rate + self.lost_rate + self.retried_rate:
            return "retried"
        if x < self.error_rate + self.lost_rate + self.retried_rate + self.slow_rate:
            return "slow"
        return None

    def _faulty(self, op: str, path: Any, call: Callable[[], T]) -> T:
        fault = self._roll(op)
        if fault is not None:
            self.stats[f"{op}:{fault}"] += 1
        if fault == "error":
            raise StorageError(f"injected transient error: {op} {path}")
        result = call()
        if fault == "lost":
            raise StorageError(f"injected lost response: {op} {path} (it was carried out)")
        if fault == "retried":
            raise AlreadyExists(f"injected: {op} {path} landed, and the client's retry of it found the object")
        return result


def _wrap(name: str) -> Callable[..., Any]:
    base = getattr(FileIO, name)

    def method(self: FaultInjectingIO, *args: Any, **kwargs: Any) -> Any:
        return self._faulty(name, args[0] if args else "", lambda: base(self, *args, **kwargs))

    method.__name__ = name
    return method


for _name in _WRITES | _READS:
    setattr(FaultInjectingIO, _name, _wrap(_name))


class Hold:
    """One held call: ``arrived`` is set when the call reaches the store and waits;
    the call proceeds once ``release`` is set (a stalled network, a paused process)."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()


class DelayedPutsIO(FileIO):
    """Wraps a FileIO so that a thread's next put-if-absent of a matching path is held
    until the test releases it: the put then lands exactly as late as the test wants,
    after whatever commits and maintenance the test ran meanwhile. No sleeping."""

    def __init__(self, inner: FileIO, match: Callable[[str], bool] | None = None) -> None:
        self.__dict__.update(inner.__dict__)  # same location, same store
        self._match = match or (lambda path: path.startswith("_lamina/versions/"))
        self._holds: dict[int, Hold] = {}
        self._holds_lock = threading.Lock()

    def hold_next_put(self) -> Hold:
        """Hold the calling thread's next matching put-if-absent."""
        hold = Hold()
        with self._holds_lock:
            self._holds[threading.get_ident()] = hold
        return hold

    def put_if_absent(self, path: str, data: Any) -> None:
        hold = None
        if self._match(path):
            with self._holds_lock:
                hold = self._holds.pop(threading.get_ident(), None)
        if hold is not None:
            hold.arrived.set()
            if not hold.release.wait(timeout=120):
                raise StorageError(f"held put of {path} was never released (test bug)")
        FileIO.put_if_absent(self, path, data)
