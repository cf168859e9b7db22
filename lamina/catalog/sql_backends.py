"""The SQL catalogs' connections: SQLite (embedded) and PostgreSQL (server) behind one small
interface, ``tx(write)`` yielding ``q(sql, params)`` with ``?`` marks.

Connection problems become CatalogUnreachable (while connecting) or StorageError
(mid-operation: the outcome of a swap is then unknown and the committer resolves it), with
the password never in a message; integrity errors pass through for the catalog to map.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lamina.errors import CatalogError, CatalogUnreachable, StorageError


def redact(uri: str) -> str:
    """``uri`` with its password (if any) replaced by ``***``."""
    p = urllib.parse.urlsplit(uri)
    userinfo, at, hostport = p.netloc.rpartition("@")  # raw text: a bad port must not hide the password
    if not at or ":" not in userinfo:
        return uri
    netloc = f"{userinfo.partition(':')[0]}:***@{hostport}"
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment))


def scrub(message: str, secret: str | None) -> str:
    return message.replace(secret, "***") if secret else message


class Backend:
    """A connection and a transaction helper; ``q(sql, params)`` runs one statement (``?`` marks)."""

    uri: str  # redacted
    IntegrityError: type[Exception]
    # Appended to a SELECT in a writing transaction: keeps the rows read from changing until it
    # ends. SQLite needs nothing (a writing transaction holds the database's write lock).
    lock_shared = ""

    def tx(self, write: bool = True) -> Any:  # context manager yielding q
        raise NotImplementedError

    def close(self) -> None:
        pass


class SqliteBackend(Backend):
    def __init__(self, path: str, uri: str) -> None:
        self.path = path
        self.uri = uri
        self.IntegrityError = sqlite3.IntegrityError
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                parent = os.path.dirname(self.path)
                if parent:
                    os.makedirs(parent, exist_ok=True)
                # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so every
                # transaction takes the write lock up front (no upgrade deadlocks), and
                # the busy timeout makes racing processes queue instead of failing.
                conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA busy_timeout = 60000")
                # WAL: readers do not block the writer and vice versa (local disks only,
                # which is where an embedded catalog lives).
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
            except (sqlite3.Error, OSError) as e:
                raise CatalogUnreachable(f"cannot open catalog {self.uri}: {e}") from None
            self._conn = conn
        return self._conn

    @contextmanager
    def tx(self, write: bool = True) -> Iterator[Callable[..., Any]]:
        with self._lock:
            conn = self._connect()
            try:
                # Writers take the lock up front; readers (WAL) see a snapshot without any lock.
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as e:
                raise StorageError(f"catalog {self.uri}: could not start a transaction: {e}") from None
            try:
                yield lambda sql, params=(): conn.execute(sql, params)
                conn.execute("COMMIT")
            except BaseException as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(e, sqlite3.IntegrityError):
                    raise
                if isinstance(e, sqlite3.Error):
                    raise StorageError(f"catalog {self.uri}: {type(e).__name__}: {e}") from None
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class PostgresBackend(Backend):
    lock_shared = " FOR SHARE"

    def __init__(self, conninfo: str, uri: str, password: str | None) -> None:
        try:
            import psycopg
        except ImportError:
            raise CatalogError("PostgreSQL catalogs need psycopg: pip install 'lamina[postgres]'") from None
        self._psycopg = psycopg
        self.conninfo = conninfo
        self.uri = uri
        self._password = password
        self.IntegrityError = psycopg.IntegrityError
        self._lock = threading.Lock()
        self._conn: Any = None
        self._connect()

    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = self._psycopg.connect(self.conninfo, autocommit=True)
            except self._psycopg.Error as e:
                raise CatalogUnreachable(
                    f"cannot connect to catalog {self.uri}: {scrub(str(e).strip(), self._password)}"
                ) from None
        return self._conn

    @contextmanager
    def tx(self, write: bool = True) -> Iterator[Callable[..., Any]]:
        psycopg = self._psycopg
        with self._lock:
            conn = self._connect()
            try:
                with conn.transaction():
                    yield lambda sql, params=(): conn.execute(sql.replace("?", "%s"), params)
            except psycopg.IntegrityError:
                raise
            except psycopg.Error as e:
                if isinstance(e, psycopg.OperationalError) or conn.closed:
                    # The connection is gone: whatever we sent may or may not have been
                    # applied. Reconnect next time; the caller decides what unknown means.
                    try:
                        conn.close()
                    except psycopg.Error:
                        pass
                    self._conn = None
                raise StorageError(
                    f"catalog {self.uri}: {type(e).__name__}: {scrub(str(e).strip(), self._password)}"
                ) from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
