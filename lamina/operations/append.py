"""Appending data files: rows written by ``Table.append``, files registered by
``add_files``, files written by an engine (``lamina.table.engine.WriteSession``).

Appends apply to any base, so they never conflict with each other; what they check
against every base is idempotence (application transactions) and, for registered
files, that a file is not in the table already.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import REMOVED_SCHEMA, Base, Change, Operation
from lamina.commit.checks import require_app_transactions_new, require_not_live
from lamina.errors import InvalidArgument, InvalidUri
from lamina.io.fileio import PATH_RULES, URI_PATTERN, VALID_PATH_EXAMPLE
from lamina.manifest.entries import fill_constant
from lamina.spec.layout import DV_DIR, META_DIR


@dataclass
class RecordAppTransaction(Operation):
    """Record that application ``app_id`` committed sequence ``seq`` (an engine's streaming batch),
    in the version of the operations it shares a transaction with: so a change that is not an
    append (a merge of a micro-batch) is idempotent too. Checked against every base it is
    applied to, as an idempotent append is: TransactionAlreadyCommitted if the base records the
    app at ``seq`` or later, and nothing of the transaction is committed. A version is made even
    if the other operations change nothing, so the sequence is recorded."""

    conflict_checks = (require_app_transactions_new,)

    app_id: str
    seq: int

    def apply(self, base: Base) -> Change:
        apps = {self.app_id: self.seq}
        require_app_transactions_new(base.metadata, apps)
        return Change("app-transaction", base.empty(), REMOVED_SCHEMA.empty_table(), app_transactions=apps)


# --- add_files: what a file registered from outside must be ------------------------------

_MAX_NAMED = 5  # offending paths named per problem in an error message


def _named(paths: pa.Array, mask: pa.Array) -> str:
    bad = pc.unique(paths.filter(mask))
    shown = ", ".join(repr(p) for p in bad.slice(0, _MAX_NAMED).to_pylist())
    return shown + (f" and {len(bad) - _MAX_NAMED} more" if len(bad) > _MAX_NAMED else "")


def _refuse(problems: list[tuple[str, pa.Array, pa.Array]], n: int, what_to_do: str) -> None:
    """Raise InvalidArgument naming, per problem, the paths that have it (each path once)."""
    parts, seen = [], pa.repeat(pa.scalar(False), n) if problems else None
    for why, paths, mask in problems:
        mask = pc.and_(pc.fill_null(mask, True), pc.invert(seen))
        if pc.any(mask).as_py():
            parts.append(f"{_named(paths, mask)} {why}")
            seen = pc.or_(seen, mask)
    if parts:
        bad = pc.sum(seen).as_py()
        raise InvalidArgument(
            f"add_files: {bad} of {n} files refused: {'; '.join(parts)}. {what_to_do} Nothing was committed."
        )


def check_added_paths(paths: pa.Array | pa.ChunkedArray, io: Any) -> None:
    """Refuse, before anything is read or written, paths ``add_files`` must not register
    (vectorized over the whole list): null, not in canonical form, under the table's
    metadata or deletion vectors, or an absolute location on another store."""
    paths = paths.combine_chunks() if isinstance(paths, pa.ChunkedArray) else paths
    paths = paths.cast(pa.string())
    n = len(paths)
    text = pc.fill_null(paths, "")
    uri = pc.match_substring_regex(text, URI_PATTERN)
    relative = pc.if_else(uri, "", text)
    problems = [("is null (every file needs a path)", paths, pc.is_null(paths))]
    problems += [(why, paths, pc.match_substring_regex(relative, pattern)) for why, pattern in PATH_RULES]
    problems.append((f"is under {DV_DIR}/, which holds deletion vectors", paths, pc.starts_with(text, f"{DV_DIR}/")))
    problems.append(
        (f"is under {META_DIR}/, which holds the table's metadata", paths, pc.starts_with(text, f"{META_DIR}/"))
    )
    if pc.any(uri).as_py():
        problems.append(("is not a location on the table's store", paths, _foreign(paths.filter(uri), paths, io)))
    _refuse(
        problems,
        n,
        f"A data-file path is relative to the table root, '/'-separated, without '.', '..' or empty "
        f"segments, e.g. {VALID_PATH_EXAMPLE}, or an absolute location on the table's store "
        f"(file:///..., s3://bucket/...) for a file the table does not own.",
    )


def check_added_files(entries: pa.Table, io: Any, check_files: bool) -> None:
    """Refuse, before anything is written, files ``add_files`` must not register (vectorized
    over the whole list): paths ``check_added_paths`` refuses, a path given twice, a size or
    record count that cannot be right, and with ``check_files`` a file that does not exist
    or has another size."""
    n = entries.num_rows
    paths = entries.column("path").combine_chunks()
    check_added_paths(paths, io)
    counts = pc.value_counts(paths)
    twice = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    size, records = entries.column("size").combine_chunks(), entries.column("record_count").combine_chunks()
    _refuse(
        [
            ("is given more than once", paths, pc.is_in(paths, value_set=twice)),
            ("has no size or a size < 1", paths, pc.invert(pc.fill_null(pc.greater(size, 0), False))),
            (
                "has no record_count or a negative one",
                paths,
                pc.invert(pc.fill_null(pc.greater_equal(records, 0), False)),
            ),
        ],
        n,
        "Give each file once, with its size in bytes and its number of rows.",
    )
    if check_files:
        actual = io.sizes(paths)
        _refuse(
            [
                ("does not exist", paths, pc.is_null(actual)),
                ("has another size on storage than the size given", paths, pc.not_equal(actual, size)),
            ],
            n,
            "Write the files under the table first and pass their sizes (or check_files=False to skip this check).",
        )


def _foreign(uris: pa.Array, paths: pa.Array, io: Any) -> pa.Array:
    """Which of ``paths`` are among ``uris`` that no FileIO of the table's store can read."""
    bad = []
    for u in uris.to_pylist():
        try:
            io.external(u)
        except InvalidUri:
            bad.append(u)
    return pc.is_in(paths, value_set=pa.array(bad, pa.string()))


def check_not_in_table(entries: pa.Table, base: Base) -> None:
    """Refuse files already live in ``base``: registering one again would double its rows."""
    live = base.live_entries(["path"]).column("path")
    paths = entries.column("path").combine_chunks()
    # Hash the (few) new paths and probe the (many) live ones, not the other way round.
    present = live.filter(pc.is_in(live, value_set=paths))
    _refuse(
        [(f"is already in the table (version {base.metadata.version})", paths, pc.is_in(paths, value_set=present))],
        entries.num_rows,
        "Register only files the table does not hold yet.",
    )


_NOTHING_REMOVED = REMOVED_SCHEMA.empty_table()  # (immutable: one for every append)


@dataclass
class AppendFiles(Operation):
    """Add data files. Applies to any base: appends never conflict.

    With ``app_transactions`` ({app id: sequence}) the append is idempotent: it is
    checked against every base it is applied to (each retry's rebase included), so
    a sequence already recorded for the app is never committed twice. With
    ``refuse_present`` (files registered by ``add_files``), so is every file: one
    already live in the base is refused rather than counted twice. Such a file may
    also be one an earlier version removed (registered again): the change is marked
    as re-adding files, so expiry, which reasons about one lifetime interval per
    file, checks such tables against the full reachability walk instead.
    """

    conflict_checks = (require_app_transactions_new, require_not_live)

    entries: pa.Table
    operation: str = "append"
    app_transactions: dict[str, int] | None = None
    refuse_present: bool = False
    built_for: int | None = None  # the version ``Base.new_files`` built ``entries`` for, if it did
    # (first, next) row ids ``entries`` hold, from the counter of the version before
    # ``built_for`` (``Base.new_files(row_ids_from=)``; see ``Change.row_ids``)
    row_ids: tuple[int, int] | None = None

    def apply(self, base: Base) -> Change:
        require_app_transactions_new(base.metadata, self.app_transactions)
        if self.refuse_present:
            require_not_live(lambda: check_not_in_table(self.entries, base))
        added, row_ids = base.stamp(self.entries, self.built_for), self.row_ids
        if row_ids is not None and self.built_for != base.version:
            # Landing as another version (a rebase): the ids and data version given for the
            # first go, the committer gives afresh.
            added, row_ids = fill_constant(added, first_row_id=None, data_version=None), None
        return Change(
            self.operation,
            added,
            _NOTHING_REMOVED,
            app_transactions=self.app_transactions,
            readds=self.refuse_present,
            row_ids=row_ids,
        )
