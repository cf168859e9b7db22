"""Table properties: every key Lamina reads, with its default, its parser and what it allows.

A table's properties are text (``VersionManifest.properties``), set when the table is
created and changed by ``Table.update_properties`` (one version; lamina.operations.properties),
except the few the format fixes at creation (``FIXED_AT_CREATION``) or lets only grow
(``ONLY_RAISED``). Code never spells a key: it reads a parsed value through its constant,

    TableProperties.WRITE_MAX_ROWS_PER_FILE.get(vm.properties)   # -> int, default 1000000
    WriterProperties.from_properties(vm.properties)              # the write.* settings at once

and ``check_properties`` refuses, at creation and in every update, every registered property
whose value its reader could not use, so a typo fails up front instead of in every later
write or maintenance call. Keys Lamina does not know are kept as they are (user metadata).
docs/configuration.md lists them all, generated from the docstrings below.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from lamina.errors import InvalidArgument, PropertyCannotChange
from lamina.spec.stats import COLUMN_PREFIX, MODE_WORDS, parse_mode

T = TypeVar("T")

# The allowed words of the properties below that take one of a few. Defined here, in the
# format's model, and imported by the code that acts on them.
MERGE_ON_READ = "merge-on-read"
COPY_ON_WRITE = "copy-on-write"
DELETE_MODES = (MERGE_ON_READ, COPY_ON_WRITE)
# period -> strftime format of the name of its automatic tag (UTC), e.g. 2026-11-21 or 2026-11-21T09
AUTO_TAG_PERIOD_FORMATS = {"daily": "%Y-%m-%d", "hourly": "%Y-%m-%dT%H"}
# what both writers accept: pyarrow.parquet and Spark's Parquet source (case-insensitive)
PARQUET_COMPRESSIONS = ("none", "snappy", "gzip", "brotli", "lz4", "lz4_raw", "zstd")
# How a data file's integer, date and timestamp columns are encoded when not by dictionary:
# DELTA_BINARY_PACKED (Parquet's delta encoding: keys and times shrink to a few bits per value
# and decode faster than compressed plain values), or PLAIN (for old readers).
INTEGER_ENCODINGS = ("delta", "plain")


@dataclass(frozen=True)
class Property(Generic[T]):
    """One table property. ``parser`` reads the stored text (ValueError if it cannot);
    the parsed value must then be ``>= minimum`` or one of ``choices``, when they are given.
    ``default`` is the value of a table that does not set it (None: the feature is off)."""

    key: str
    default: T
    parser: Callable[[str], T]
    expects: str  # what the parser reads, for messages: "an integer", "a number", "one of a, b"
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    render: Callable[[T], str] = field(default=str, repr=False)  # a value as the table stores it

    def problem(self, raw: Any) -> str | None:
        """What to give instead of ``raw`` ("give an integer >= 1"), or None if ``raw`` is usable."""
        try:
            self._parse(raw)
        except (TypeError, ValueError):
            return f"give {self.expects}"
        return None

    def parse(self, raw: Any) -> T:
        """``raw`` (the stored text) as this property's value; InvalidArgument if it cannot be used."""
        try:
            return self._parse(raw)
        except (TypeError, ValueError):
            raise InvalidArgument(f"table property {self.key}={raw!r} cannot be used: give {self.expects}") from None

    def get(self, properties: Mapping[str, Any]) -> T:
        """This property's value in ``properties`` (a table's), or its default if it is not set."""
        raw = properties.get(self.key)
        return self.default if raw is None else self.parse(raw)

    @property
    def default_text(self) -> str | None:
        """The default as a table would store it (None: unset)."""
        return None if self.default is None else self.render(self.default)

    def _parse(self, raw: Any) -> T:
        value = self.parser(str(raw))
        if self.minimum is not None and not value >= self.minimum:  # type: ignore[operator]
            raise ValueError(f"{value!r} < {self.minimum}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{value!r} is not one of {self.choices}")
        return value


def _parse_int(text: str) -> int:
    return int(text.strip())  # "1e6" and "1.0" are refused: an integer property holds digits


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not finite")
    return value


def _parse_columns(text: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(",") if c.strip())


def _int_property(key: str, default: int, minimum: int) -> Property[int]:
    return Property(key, default, _parse_int, f"an integer >= {minimum}", minimum=minimum)


def _float_property(key: str, default: float, minimum: float) -> Property[float]:
    return Property(key, default, _parse_float, f"a number >= {minimum:g}", minimum=minimum, render="{:g}".format)


@overload
def _word_property(key: str, default: str, words: tuple[str, ...], fold_case: bool = ...) -> Property[str]: ...
@overload
def _word_property(key: str, default: None, words: tuple[str, ...], fold_case: bool = ...) -> Property[str | None]: ...
def _word_property(key: str, default: str | None, words: tuple[str, ...], fold_case: bool = False) -> Property[Any]:
    parser: Callable[[str], str] = str.lower if fold_case else str
    return Property(key, default, parser, f"one of {', '.join(words)}", choices=words)


class TableProperties:
    """Every table property Lamina reads (pyiceberg's TableProperties, typed). Each constant's
    docstring says what it does; docs/configuration.md is generated from them."""

    WRITE_MAX_ROWS_PER_FILE = _int_property("write.max-rows-per-file", 1_000_000, 1)
    """The most rows one data file of a write holds (Lamina's writer and Spark's)."""
    WRITE_PARQUET_COMPRESSION = _word_property(
        "write.parquet.compression", "snappy", PARQUET_COMPRESSIONS, fold_case=True
    )
    """The codec of every Parquet data file, Lamina's writer's and Spark's (any case), small
    files and compaction's output included."""
    WRITE_PARQUET_INTEGER_ENCODING = _word_property(
        "write.parquet.integer-encoding", "delta", INTEGER_ENCODINGS, fold_case=True
    )
    """How Lamina's writer encodes the integer, date and timestamp columns it does not
    dictionary-encode, in files of 8,192 rows or more without nested columns: ``delta`` is
    Parquet's ``DELTA_BINARY_PACKED`` (increasing keys and times take a few bits per value, and
    decode faster than compressed plain values: what a merge's key read and a compaction
    read), ``plain`` for readers without Parquet's delta encoding (Spark's vectorized reader
    before 3.3). Spark's writer encodes as Spark does."""
    WRITE_PARQUET_SMALL_FILE_BYTES = _int_property("write.parquet.small-file-bytes", 256 * 1024, 0)
    """Lamina's writer stores a data file whose rows take fewer bytes in Arrow without footer
    statistics (``0``: every file keeps them), and leaves out the Arrow schema pyarrow
    otherwise stores in the footer (``ARROW:schema``) where the Parquet schema alone reads back
    as the same names, types and nullability. Reading a small file is mostly fixed work per
    file, which parsing the footer adds to on every read; its manifest entry holds its
    statistics, which is what prunes it. Such files are compressed with the table's codec like
    any other. Appends and streaming leave them; compaction rewrites them into larger files
    with footer statistics."""
    WRITE_PARQUET_ROW_GROUP_SIZE_BYTES = _int_property("write.parquet.row-group-size-bytes", 128 * 1024 * 1024, 1)
    """Every writer (Lamina's, and Spark's through ``parquet.block.size``) ends a Parquet row
    group at about this many bytes (Iceberg's property), so engines read a large file in
    parallel, a task per row group."""
    WRITE_PARQUET_ROW_GROUP_LIMIT = _int_property("write.parquet.row-group-limit", 1024 * 1024, 1)
    """Every writer (Lamina's, and Spark's through ``parquet.block.row.count.limit``) ends a
    Parquet row group at this many rows at most (pyiceberg's property), whatever their bytes."""
    WRITE_DELETE_MODE = _word_property("write.delete.mode", MERGE_ON_READ, DELETE_MODES)
    """How delete, update and merge change rows when the call names no mode: deletion vectors
    (``merge-on-read``) or files rewritten without the rows (``copy-on-write``)."""
    WRITE_SORT_ORDER = Property[tuple[str, ...]](
        "write.sort-order", (), _parse_columns, "column names separated by commas", render=", ".join
    )
    """The sort order (columns ascending, nulls last; e.g. ``ts, id``) of a table whose version
    manifest has none: what writes and compaction sort files by. ``update_sort_order``
    replaces it with a sort order of the table's own."""

    WRITE_METADATA_METRICS_DEFAULT = Property(
        "write.metadata.metrics.default", None, parse_mode, f"one of {MODE_WORDS}"
    )
    """The column statistics mode of every column without its own
    (``write.metadata.metrics.column.<col>``). Unset: the first
    ``write.metadata.metrics.max-inferred-column-defaults`` top-level columns get
    ``truncate(16)``, the others ``none``."""
    WRITE_METADATA_METRICS_MAX_INFERRED_COLUMN_DEFAULTS = _int_property(
        "write.metadata.metrics.max-inferred-column-defaults", 32, 0
    )
    """While ``write.metadata.metrics.default`` is unset: how many top-level columns, first
    to last, keep statistics (``truncate(16)``) in manifest entries; the others keep none."""

    MANIFEST_INLINE_MAX_FILES = _int_property("manifest.inline-max-files", 64, 0)
    """The most data-file entries the root manifest holds inline; past it a commit writes
    them as leaf manifests."""
    MANIFEST_ROOT_FORMAT = _word_property(
        "manifest.root-format", "inline", ("inline", "arrow", "parquet"), fold_case=True
    )
    """Read at creation (any case). ``inline`` gives the table the features
    ``inline-root-manifests`` and ``arrow-root-manifests``: a version manifest carries its
    root manifest (Arrow IPC bytes) when it is at most ``manifest.root-inline-max-bytes``,
    larger roots are Arrow IPC files; ``arrow`` only the latter (every root an Arrow IPC
    file); ``parquet`` keeps roots Parquet files, readable without either feature."""
    MANIFEST_LEAF_FORMAT = _word_property("manifest.leaf-format", "arrow", ("arrow", "parquet"), fold_case=True)
    """Read at creation (any case). ``arrow`` gives the table the feature
    ``arrow-leaf-manifests``: leaves of at most 1,024 entries are Arrow IPC files, larger ones
    Parquet; ``parquet`` keeps every leaf a Parquet file, readable without the feature."""
    MANIFEST_ROOT_INLINE_MAX_BYTES = _int_property("manifest.root-inline-max-bytes", 65_536, 0)
    """On a table with ``inline-root-manifests``: the largest root (its Arrow IPC bytes) a
    version manifest carries; a larger one is written as a root file (``0``: always a file)."""
    MANIFEST_LEAF_TARGET_FILES = _int_property("manifest.leaf-target-files", 10_000, 1)
    """The most entries one leaf manifest holds."""
    MANIFEST_MERGE_MIN_LEAVES = _int_property("manifest.merge-min-leaves", 8, 2)
    """How many leaves holding fewer than half the target may accumulate before a commit
    merges them."""

    COMMIT_RETRY_MAX_ATTEMPTS = _int_property("commit.retry.max-attempts", 200, 1)
    """The most attempts of one commit; exhausting them raises ``CommitRetriesExhausted``,
    nothing committed."""
    COMMIT_RETRY_MAX_SECONDS = _float_property("commit.retry.max-seconds", 300.0, 0)
    """The most seconds one commit keeps attempting."""
    COMMIT_RETRY_BACKOFF_MIN_MS = _float_property("commit.retry.backoff-min-ms", 1.0, 0)
    """The shortest wait, in milliseconds, before a retry (full jitter, doubling)."""
    COMMIT_RETRY_BACKOFF_MAX_MS = _float_property("commit.retry.backoff-max-ms", 250.0, 0)
    """The longest wait, in milliseconds, before a retry."""

    EXPIRE_READER_GRACE_MS = _int_property("expire.reader-grace-ms", 3_600_000, 0)
    """Expiry keeps every version superseded less than this many milliseconds ago (one
    hour): a reader that opened it while it was current has that long to finish."""
    EXPIRE_SLOT_RETENTION_MS = _int_property("expire.slot-retention-ms", 24 * 3_600_000, 0)
    """An expired version's slot file is kept at least this many milliseconds (one day) after
    the record that expired it. A writer whose put lands within half of it after it saw the
    previous version as the newest skips looking up its slot's record, which keeps an append
    at two requests on an object store; ``0`` frees slots at once, and every writer looks."""
    VERSION_SLOT_CHUNK_SIZE = _int_property("version.slot-chunk-size", 1000, 1)
    """How many consecutive version slots share one directory of expiry records (a writer's
    look-up lists one chunk's)."""

    ROW_LINEAGE_ENABLED = _word_property("row-lineage.enabled", "true", ("true", "false"), fold_case=True)
    """Read at creation: ``false`` creates the table without row lineage (no ``_row_id``, no
    change data feed); ``Table.enable_row_lineage()`` turns it on later."""

    SCHEMA_TYPE_WIDENING_ENABLED = _word_property(
        "schema.type-widening.enabled", "false", ("true", "false"), fold_case=True
    )
    """``true``: a write with ``schema_mode="merge"`` also widens a column the data holds a
    wider type of (``int32`` to ``int64``, ``float32`` to ``float64``, a longer decimal...), as
    Delta's ``delta.enableTypeWidening``; ``false``: it only adds columns, and data wider than
    a column is refused."""

    TAG_AUTO_CREATE = _word_property("tag.auto-create", None, tuple(AUTO_TAG_PERIOD_FORMATS))
    """Tag the last version of every ``daily`` or ``hourly`` period (UTC), named
    ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH``. Unset: no automatic tags."""
    TAG_AUTO_RETAIN_MAX = _int_property("tag.auto-retain-max", 0, 0)
    """Keep the newest N automatic tags and delete the older ones (``0``: keep all)."""

    ICEBERG_ENABLED = _word_property("iceberg.enabled", "false", ("true", "false"), fold_case=True)
    """``true``: every commit also writes Iceberg v3 metadata for the new version, so Iceberg
    readers read the table (the Iceberg view). Set on create or later with
    ``Table.set_iceberg_enabled()`` (``lamina iceberg enable``), which also brings the view up
    to date at once."""
    ICEBERG_SYNC_MODE = _word_property("iceberg.sync-mode", "async", ("async", "sync"), fold_case=True)
    """When a commit writes the Iceberg view of its version: ``async``, after the commit returns,
    by one background thread per process in commit order (a sync there covers every version
    still waiting), off the commit's critical path; ``sync``, before the commit returns, for a
    reader that must find the view current the moment the commit returns. Either way the
    commit is acknowledged first, and ``lamina.iceberg.flush()`` waits for the view."""

    @classmethod
    def all(cls) -> tuple[Property[Any], ...]:
        """Every registered property, in the order above."""
        return tuple(p for p in vars(cls).values() if isinstance(p, Property))


def check_properties(properties: Mapping[str, Any], outcome: str = "Nothing was created.") -> None:
    """InvalidArgument naming every registered property whose value its parser refuses
    (a number out of range, not a number, none of its words), and every key in one of
    Lamina's namespaces (``write.``, ``row-lineage``, ...) that is no property of it: a
    misspelt key would otherwise be kept and silently do nothing (Delta refuses unknown
    ``delta.`` keys alike). Other keys are the user's. ``outcome`` ends the message."""
    bad = []
    for key, raw in properties.items():
        prop, problem = _lookup(str(key))
        if problem is None and prop is not None and (wrong := prop.problem(raw)) is not None:
            problem = f"{key}={raw!r} ({wrong})"
        if problem is not None:
            bad.append(problem)
    _refuse(bad, outcome)


def check_property_keys(keys: Iterable[str], outcome: str) -> None:
    """``check_properties``'s rule on keys alone (keys being removed): InvalidArgument naming
    every key in one of Lamina's namespaces that is no property of it."""
    _refuse([problem for key in keys if (problem := _lookup(str(key))[1]) is not None], outcome)


def _lookup(key: str) -> tuple[Property[Any] | None, str | None]:
    """The property ``key`` is (None: a user's key), or why it is none (a misspelling)."""
    registered = _registered()
    prop = registered.get(key)
    if prop is None and key.startswith(COLUMN_PREFIX):
        prop = Property(key, None, parse_mode, f"one of {MODE_WORDS}")  # a column's statistics mode
    if prop is None and key.split(".")[0] in {k.split(".")[0] for k in registered}:
        close = difflib.get_close_matches(key, registered, n=1)
        return None, f"{key!r} is no Lamina table property" + (f" (did you mean {close[0]!r}?)" if close else "")
    return prop, None


def _registered() -> dict[str, Property[Any]]:
    return {p.key: p for p in TableProperties.all()}


def _refuse(bad: list[str], outcome: str) -> None:
    if bad:
        raise InvalidArgument(f"table properties that cannot be used: {'; '.join(bad)}. {outcome}")


# What the format fixes when a table is created, and why; a change of their meaning (the
# parsed value: "1000" and " 1000" mean the same) is refused (check_property_change).
FIXED_AT_CREATION: dict[str, str] = {
    TableProperties.VERSION_SLOT_CHUNK_SIZE.key: "writers and expiry must agree on which record covers a version slot (docs/format.md, The commit guarantee)",
    TableProperties.MANIFEST_ROOT_FORMAT.key: "it chose the features of the table's root manifests when the table was created (docs/format.md, Feature "
    "flags), which readers rely on; create a new table to have other ones",
    TableProperties.MANIFEST_LEAF_FORMAT.key: "it chose the features of the table's leaf manifests when the table was created (docs/format.md, Feature "
    "flags), which readers rely on; create a new table to have other ones",
    TableProperties.ROW_LINEAGE_ENABLED.key: "it is read when the table is created; turn row lineage on with Table.enable_row_lineage() (it cannot be "
    "turned off)",
}
# What may be raised but never lowered, and why.
ONLY_RAISED: dict[str, str] = {
    TableProperties.EXPIRE_SLOT_RETENTION_MS.key: "a writer that read the current value may skip looking up its version slot's record for up to half of it, "
    "and a lower one could let expiry free the slot under that writer (docs/format.md, The commit guarantee)",
}


def check_property_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """PropertyCannotChange naming every property whose meaning ``new`` changes from ``old``'s
    (a table's properties before and after an update) where the format fixes it at creation,
    and every one it lowers where it may only be raised."""
    registered = _registered()
    bad = []
    for key, why in FIXED_AT_CREATION.items():
        prop = registered[key]
        before, after = prop.get(old), prop.get(new)
        if before != after:
            bad.append(f"{key} cannot change ({prop.render(before)} -> {prop.render(after)}): {why}")
    for key, why in ONLY_RAISED.items():
        prop = registered[key]
        before, after = prop.get(old), prop.get(new)
        if after < before:
            bad.append(f"{key} can only be raised, not lowered ({prop.render(before)} -> {prop.render(after)}): {why}")
    if bad:
        raise PropertyCannotChange(f"{'; '.join(bad)}. Nothing was committed.")


@dataclass(frozen=True)
class WriterProperties:
    """How data files are written: the ``write.*`` properties of a table, parsed."""

    max_rows_per_file: int = TableProperties.WRITE_MAX_ROWS_PER_FILE.default
    parquet_compression: str = TableProperties.WRITE_PARQUET_COMPRESSION.default
    delete_mode: str = TableProperties.WRITE_DELETE_MODE.default
    sort_order: tuple[str, ...] = TableProperties.WRITE_SORT_ORDER.default
    parquet_integer_encoding: str = TableProperties.WRITE_PARQUET_INTEGER_ENCODING.default
    parquet_small_file_bytes: int = TableProperties.WRITE_PARQUET_SMALL_FILE_BYTES.default
    row_group_bytes: int = TableProperties.WRITE_PARQUET_ROW_GROUP_SIZE_BYTES.default
    row_group_rows: int = TableProperties.WRITE_PARQUET_ROW_GROUP_LIMIT.default

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> WriterProperties:
        p = TableProperties
        return cls(
            max_rows_per_file=p.WRITE_MAX_ROWS_PER_FILE.get(properties),
            parquet_compression=p.WRITE_PARQUET_COMPRESSION.get(properties),
            parquet_integer_encoding=p.WRITE_PARQUET_INTEGER_ENCODING.get(properties),
            parquet_small_file_bytes=p.WRITE_PARQUET_SMALL_FILE_BYTES.get(properties),
            row_group_bytes=p.WRITE_PARQUET_ROW_GROUP_SIZE_BYTES.get(properties),
            row_group_rows=p.WRITE_PARQUET_ROW_GROUP_LIMIT.get(properties),
            delete_mode=p.WRITE_DELETE_MODE.get(properties),
            sort_order=p.WRITE_SORT_ORDER.get(properties),
        )
