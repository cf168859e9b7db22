"""Table operations as data: what they add and remove, re-applied to each base.

``apply(base)`` is called once per commit attempt; data files are written
once, before the first attempt, and reused by every retry.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import Change
from lamina.errors import InvalidArgument, TransactionAlreadyCommitted
from lamina.expr import AlwaysTrue, Expr, to_arrow_filter
from lamina.io.fileio import PATH_RULES, VALID_PATH_EXAMPLE
from lamina.manifest.entries import conform, fill_constant
from lamina.manifest.tree import live_data_entries
from lamina.table.deletes import dvs_of_plan, file_keys
from lamina.spec.layout import DATA_DIR, DV_DIR
from lamina.spec.version import VersionManifest

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lamina-overwrite")

if TYPE_CHECKING:
    from lamina.table.table import Table

# A candidate file with no row matching the predicate stays as it is.
UNTOUCHED = object()

REMOVED_SCHEMA = pa.schema([pa.field("path", pa.string()), pa.field("added_version", pa.int64())])


def _removed(entries: pa.Table) -> pa.Table:
    return pa.table({"path": entries.column("path"), "added_version": entries.column("added_version")}, schema=REMOVED_SCHEMA)


def _stamp(entries: pa.Table, table: "Table", base: VersionManifest) -> pa.Table:
    """New entries for version base+1 in base's manifest schema."""
    e = conform(entries, table._mschema_of(base))
    return fill_constant(e, added_version=base.version + 1, status=1, removed_version=None)


def check_app_transactions(base: VersionManifest, app_transactions: dict[str, int] | None) -> None:
    """Raise TransactionAlreadyCommitted if ``base`` already records any app at >= its sequence."""
    for app, seq in (app_transactions or {}).items():
        done = base.app_transactions.get(app)
        if done is not None and done >= seq:
            raise TransactionAlreadyCommitted(
                f"application {app!r} already committed sequence {done} (>= {seq}) at version {base.version}; "
                "nothing was committed",
                app, seq, base.version,
            )


class ProbedApply:
    """``apply(base)`` remembered for the last base: an operation that is first probed on
    the latest version (to see whether it changes anything at all) and then committed on
    that same version does its work once. Subclasses implement ``_apply``."""

    _last: tuple[str, Change] | None = None

    def apply(self, base: VersionManifest) -> Change:
        if self._last is not None and self._last[0] == base.commit_id:
            return self._last[1]
        change = self._apply(base)
        self._last = (base.commit_id, change)
        return change

    def _apply(self, base: VersionManifest) -> Change:
        raise NotImplementedError


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
        raise InvalidArgument(f"add_files: {bad} of {n} files refused: {'; '.join(parts)}. {what_to_do} Nothing was committed.")


def check_added_files(entries: pa.Table, io: Any, check_files: bool) -> None:
    """Refuse, before anything is written, files ``add_files`` must not register (vectorized
    over the whole list): paths that are not a data-file path of the table, a path given
    twice, a size or record count that cannot be right, and with ``check_files`` a file
    that does not exist or has another size."""
    n = entries.num_rows
    paths = entries.column("path").combine_chunks()
    text = pc.fill_null(paths, "")
    problems = [("is null (every file needs a path)", paths, pc.is_null(paths))]
    problems += [(why, paths, pc.match_substring_regex(text, pattern)) for why, pattern in PATH_RULES]
    problems.append((f"is not under {DATA_DIR}/", paths, pc.invert(pc.starts_with(text, f"{DATA_DIR}/"))))
    problems.append((f"is under {DV_DIR}/, which holds deletion vectors", paths, pc.starts_with(text, f"{DV_DIR}/")))
    _refuse(
        problems, n,
        f"A data-file path is relative to the table root and under {DATA_DIR}/, '/'-separated, "
        f"without '.', '..' or empty segments, e.g. {VALID_PATH_EXAMPLE}.",
    )
    counts = pc.value_counts(paths)
    twice = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    size, records = entries.column("size").combine_chunks(), entries.column("record_count").combine_chunks()
    _refuse(
        [
            ("is given more than once", paths, pc.is_in(paths, value_set=twice)),
            ("has no size or a size < 1", paths, pc.invert(pc.fill_null(pc.greater(size, 0), False))),
            ("has no record_count or a negative one", paths, pc.invert(pc.fill_null(pc.greater_equal(records, 0), False))),
        ],
        n, "Give each file once, with its size in bytes and its number of rows.",
    )
    if check_files:
        actual = io.sizes(paths)
        _refuse(
            [
                ("does not exist", paths, pc.is_null(actual)),
                ("has another size on storage than the size given", paths, pc.not_equal(actual, size)),
            ],
            n, "Write the files under the table first and pass their sizes (or check_files=False to skip this check).",
        )


def check_not_in_table(entries: pa.Table, table: "Table", base: VersionManifest) -> None:
    """Refuse files already live in ``base``: registering one again would double its rows."""
    live = live_data_entries(table.io, base.root_manifest, table._mschema_of(base), columns=["path"]).column("path")
    paths = entries.column("path").combine_chunks()
    # Hash the (few) new paths and probe the (many) live ones, not the other way round.
    present = live.filter(pc.is_in(live, value_set=paths))
    _refuse(
        [(f"is already in the table (version {base.version})", paths, pc.is_in(paths, value_set=present))],
        entries.num_rows, "Register only files the table does not hold yet.",
    )


@dataclass
class AppendFiles:
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

    table: "Table"
    entries: pa.Table
    operation: str = "append"
    app_transactions: dict[str, int] | None = None
    refuse_present: bool = False

    def apply(self, base: VersionManifest) -> Change:
        check_app_transactions(base, self.app_transactions)
        if self.refuse_present:
            check_not_in_table(self.entries, self.table, base)
        return Change(
            self.operation,
            _stamp(self.entries, self.table, base),
            REMOVED_SCHEMA.empty_table(),
            app_transactions=self.app_transactions,
            readds=self.refuse_present,
        )


@dataclass
class Overwrite:
    """Replace the rows matching ``predicate`` (all rows if AlwaysTrue) with new files.

    Re-evaluated against every base: the overwrite takes effect after whatever
    committed before it, as if it had run last, so a concurrent append into the
    overwritten range is replaced too (serializable order), never half-kept.
    Files only partly matching are rewritten without the matching rows.
    """

    table: "Table"
    predicate: Expr
    entries: pa.Table
    write: Callable[[pa.Table], pa.Table]  # writes rows as data files, returns their entries
    readds: bool = False  # ``entries`` are files given by the user (add_files): see AppendFiles
    # path -> UNTOUCHED | entries of the rewritten remainder | None (every row matched); kept
    # across retries so a rebase only reads files it has not seen.
    _rewrites: dict[tuple, Any] = field(default_factory=dict)

    def apply(self, base: VersionManifest) -> Change:
        scan = self.table._scan_at(base, self.predicate)
        candidates = scan.plan().entries
        added = [_stamp(self.entries, self.table, base)] if self.entries.num_rows else []
        if isinstance(self.predicate, AlwaysTrue):
            removed = candidates
        else:
            filt = to_arrow_filter(self.predicate)
            paths = candidates.column("path").to_pylist()
            dvs = dvs_of_plan(candidates)
            keys = file_keys(candidates)
            unseen = [i for i, k in enumerate(keys) if k not in self._rewrites]
            outs = _pool.map(lambda i: self._rewrite_file(scan, paths[i], filt, dvs[i]), unseen)
            for i, outcome in zip(unseen, outs):
                self._rewrites[keys[i]] = outcome
            touched = [self._rewrites[k] is not UNTOUCHED for k in keys]
            removed = candidates.filter(pa.array(touched, pa.bool_())) if paths else candidates
            for k, t in zip(keys, touched):
                remainder = self._rewrites[k]
                if t and remainder is not None:
                    added.append(_stamp(remainder, self.table, base))
        adds = pa.concat_tables(added) if added else self.table._mschema_of(base).empty_table()
        return Change("overwrite", adds, _removed(removed), summary={"predicate": str(self.predicate)},
                      readds=self.readds and self.entries.num_rows > 0)

    def _rewrite_file(self, scan: Any, path: str, filt: Any, dv: Any = None) -> Any:
        """UNTOUCHED if no row matches, None if all do, else the entries of the rewritten remainder
        (live rows only: a row a deletion vector removed stays removed)."""
        rows = scan._read_file(path, scan.schema.names, None, dv)
        numbered = rows.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
        matched = numbered.filter(filt).column("__row")
        if len(matched) == 0:
            return UNTOUCHED
        if len(matched) == rows.num_rows:
            return None
        # SQL semantics: a row stays unless the predicate is TRUE for it (false or null stay).
        return self.write(rows.filter(pc.invert(pc.is_in(numbered.column("__row"), value_set=matched))))


def _identity(entries: pa.Table) -> pa.Array:
    dv = pc.binary_join_element_wise(
        pc.fill_null(entries.column("dv_path"), ""), pc.cast(pc.fill_null(entries.column("dv_offset"), -1), pa.string()), "@"
    )
    return pc.binary_join_element_wise(entries.column("path"), dv, "#").combine_chunks() if entries.num_rows else pa.array([], pa.string())


@dataclass
class Rollback:
    """Make the table's content equal ``target``'s, as a new version (history is kept).

    Re-evaluated against every base: whatever committed meanwhile is undone too,
    since the result must equal the target. Files the target had and the base
    does not are re-added (same files, new entries), which the version manifest
    records for expiry (``last_readd_version``).
    """

    table: "Table"
    target: VersionManifest
    tag: str | None = None

    def apply(self, base: VersionManifest) -> Change:
        # (Table.rollback holds the target's files with a guard tag while this runs.)
        mschema = self.table._mschema_of(base)
        want = conform(live_data_entries(self.table.io, self.target.root_manifest, self.table._mschema_of(self.target)), mschema)
        have = live_data_entries(self.table.io, base.root_manifest, mschema, columns=["path", "added_version", "dv_path", "dv_offset"])
        # A file is the same only with the same deletion vector: (path, DV) is its identity.
        wkey, hkey = _identity(want), _identity(have)
        readd = want.filter(pc.invert(pc.is_in(wkey, value_set=hkey)))
        drop = have.filter(pc.invert(pc.is_in(hkey, value_set=wkey)))
        summary = {"rollback-to": self.target.version, "readded-files": readd.num_rows}
        if self.tag is not None:
            summary["rollback-tag"] = self.tag
        return Change(
            "rollback",
            fill_constant(readd, added_version=base.version + 1, status=1, removed_version=None),
            _removed(drop),
            summary=summary,
            readds=readd.num_rows > 0,
        )
