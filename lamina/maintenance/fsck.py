"""fsck: does every reference of the latest version exist, is every slot readable, and
what is unreferenced?

Unreferenced = under the table root but referenced by no kept version (existing
versions, tags, versions a SQL catalog committed but has not published), and not
table metadata. Those are what crashed or losing writers leave behind; they are
never visible to readers. Damage -- a version file that does not parse, a
tombstone that is not one, a freed-slot record that does not parse -- is an
error, never "unreferenced": cleanup must not act on a table it cannot read.
Nor does fsck list anything as unreferenced when damage hides what some kept
version or tag references (a missing or corrupt manifest, a damaged version,
tombstone or tag): every file might be one of those, so none is called
unreferenced (``unreferenced_known`` is False) until the damage is repaired.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lamina.errors import CorruptMetadata, LaminaError
from lamina.iceberg.gc import check as iceberg_check
from lamina.maintenance.reachability import kept_versions, leaf_paths, live_entries, paths_of, referenced_files, root_of
from lamina.maintenance.reports import short_repr
from lamina.manifest.entries import manifest_schema_of
from lamina.manifest.tree import live_data_entries
from lamina.spec.layout import (
    BRANCH_LOGS_DIR,
    BRANCHES_DIR,
    HINT_PATH,
    MAIN_LOG,
    PENDING_DIR,
    TAGS_DIR,
    VERSIONS_DIR,
    WRITES_DIR,
    is_inline_root,
)
from lamina.spec.lineage import FIRST_ROW_ID, has_lineage, lineage_problems
from lamina.spec.slot import FREED_DIR
from lamina.timeutil import now_ms

LINEAGE_ENTRY_COLUMNS = ["path", "record_count", "dv_cardinality", FIRST_ROW_ID]


@dataclass
class FsckReport:
    version: int
    checked_files: int = 0
    missing: list[str] = field(default_factory=list)  # referenced by the latest version but absent
    unreferenced: list[str] = field(default_factory=list)  # present but referenced by no version
    errors: list[str] = field(default_factory=list)  # damaged metadata: versions, tombstones, records
    # False when damage hid what a kept version or tag references: ``unreferenced`` is then
    # left empty, since any file present might be one of those
    unreferenced_known: bool = True
    # the Iceberg view: how it lags the table (behind, disabled but present); a file it
    # references that is missing is an error
    iceberg: list[str] = field(default_factory=list)

    __repr__ = short_repr

    @property
    def ok(self) -> bool:
        return not self.missing and not self.errors


def fsck(table) -> FsckReport:
    io, log = table.io, table.log
    latest = log.latest()
    report = FsckReport(latest.version)
    present = {o.path: o.size for o in io.walk()}
    complete = True  # every kept version's and tag's references were read

    def damaged(message: str) -> None:
        nonlocal complete
        report.errors.append(message)
        complete = False

    # 1. the latest version: every reference exists. Each manifest is looked for before it
    #    is read, so one that is gone is listed as missing and the others are still checked.
    # (a root the version manifest carries is no file: it is there if the version is)
    carried = is_inline_root(latest.root_manifest)
    manifests = [] if latest.root_manifest is None or carried else [latest.root_manifest]
    files: list[str] = []
    try:
        if carried or latest.root_manifest in present:
            root = root_of(io, latest)
            leaves = leaf_paths(root).to_pylist()
            manifests += leaves
            files = referenced_files(live_entries(io, latest, root, [p for p in leaves if p in present])).to_pylist()
        if has_lineage(latest) and all(p in present for p in manifests):
            # row lineage: every live file has ids, no two share one, none at or past the counter
            entries = live_data_entries(
                io,
                latest.root_manifest,
                manifest_schema_of(latest),
                columns=LINEAGE_ENTRY_COLUMNS,
                inline=latest.root_inline,
            )
            report.errors += [f"version {latest.version}: {p}" for p in lineage_problems(entries, latest.next_row_id)]
    except CorruptMetadata as e:
        damaged(f"version {latest.version}: {e}")
    latest_refs = set(manifests) | set(files)
    for p in sorted(latest_refs):
        report.checked_files += 1
        if p not in present:
            report.missing.append(p)
    if any(p not in present for p in manifests):
        complete = False  # what a missing manifest lists is unknown
    # 2. every slot holds a readable version or a tombstone (told apart by content)
    referenced = {log.layout.hint_path} | latest_refs
    try:
        slots = log.scan_slots()
    except CorruptMetadata as e:
        damaged(str(e))
        slots = None
    loaded = []  # the versions that read, for step 3 (each is loaded once)
    if slots is not None:
        for v in slots.versions:
            try:
                loaded.append(log.load(v, check_freed=False))
            except CorruptMetadata as e:
                damaged(f"version {v}: {e}")
            except LaminaError:
                pass  # expired meanwhile
        referenced.update(log.version_path(v) for v in slots.versions + list(slots.tombstones))
        referenced.update(r.path for r in slots.records)
        for r in slots.records:
            try:
                log.read_record(r)
            except CorruptMetadata as e:
                report.errors.append(str(e))  # it names slots, no files: the walk stays complete
        # Slot files in recorded ranges keep their slots taken until their record is older than
        # the slot retention (an expired version's file): table metadata until then. Past it
        # (and late puts into freed slots) they are unreferenced: expiry and orphan cleanup
        # delete them.
        freeable = set(slots.freeable_strays(now_ms(), latest.properties))
        referenced.update(log.version_path(v) for v in slots.strays if v not in freeable)
    # 3. everything the other kept versions and the tags reference (the latest's tree is
    #    step 1's: read again, its damage would be reported twice)
    try:
        others = [vm for vm in kept_versions(io, log, loaded) if vm.root_manifest != latest.root_manifest]
        referenced.update(paths_of(io, others).to_pylist())
    except LaminaError as e:
        damaged(str(e))
    # 4. the Iceberg view (lamina.iceberg): behind the latest version, or missing a file it needs
    view = iceberg_check(io, latest)
    report.iceberg = view.problems
    report.errors += [f"iceberg view: {p}" for p in view.missing]
    referenced.update(view.referenced)
    if view.missing:
        complete = False
    report.unreferenced_known = complete
    if complete:
        # (branch records and branch logs: their slots are what says what is referenced)
        meta: tuple[str, ...] = (
            f"{TAGS_DIR}/",
            f"{WRITES_DIR}/",
            f"{PENDING_DIR}/",
            f"{FREED_DIR}/",
            f"{BRANCHES_DIR}/",
            f"{BRANCH_LOGS_DIR}/",
        )
        if log.layout != MAIN_LOG:  # a branch's handle: main's log is metadata of another branch
            meta += (f"{VERSIONS_DIR}/", HINT_PATH)
        report.unreferenced = sorted(p for p in present if p not in referenced and not p.startswith(meta))
    return report
