"""The explorer's caches of values derived from immutable files (version files, manifests):
thread-safe LRUs shared by the requests of one explorer."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["Lru", "RowCache"]


class Lru:
    """A small thread-safe LRU of values derived from files. Requests that ask for a key
    while it is being made wait for that one computation (the page's requests arrive
    together: one listing of the versions, not one per request)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Future] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, make: Callable[[], Any], valid: Callable[[Any], bool] | None = None) -> Any:
        """The value of ``key``, made once; ``valid(value)``: whether a cached value still
        holds (if not, it is made again)."""
        for _ in range(2):  # a stale value is dropped once, then made again
            with self._lock:
                found = self._items.get(key)
                mine = found is None
                fut: Future = Future() if found is None else found
                if mine:
                    self._items[key] = fut
                    while len(self._items) > self._size:
                        self._items.popitem(last=False)
                else:
                    self._items.move_to_end(key)
            if mine:
                try:
                    fut.set_result(make())
                except BaseException as e:
                    fut.set_exception(e)
                    self._drop(key, fut)
                    raise
                return fut.result()
            value = fut.result()  # the maker's error, if it failed
            if valid is None or valid(value):
                return value
            self._drop(key, fut)
        return make()

    def _drop(self, key: Any, fut: Future) -> None:
        with self._lock:
            if self._items.get(key) is fut:
                del self._items[key]


class RowCache:
    """A thread-safe LRU of many small immutable values, looked up and stored in bulk (no
    waiting on one another: two requests that miss the same rows both read them)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, keys: list[Any]) -> dict[Any, Any]:
        with self._lock:
            return {k: self._items[k] for k in keys if k in self._items}

    def put_many(self, items: dict[Any, Any]) -> None:
        with self._lock:
            self._items.update(items)
            for k in items:
                self._items.move_to_end(k)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
