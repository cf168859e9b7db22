"""fsck: does every reference of the latest version exist, is every slot readable, and
what is unreferenced?

Unreferenced = under the table root but referenced by no kept version (existing
versions, tags, versions a SQL catalog committed but has not published), and not
table metadata. Those are what crashed or losing writers leave behind; they are
never visible to readers. Damage -- a version file that does not parse, a
tombstone that is not one, a freed-slot record that does not parse -- is an
error, never "unreferenced": cleanup must not act on a table it cannot read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lamina.errors import CorruptMetadata, LaminaError
from lamina.maintenance.reachability import kept_versions, live_entries, manifest_paths, paths_of, referenced_files, root_of
from lamina.spec.layout import HINT_PATH, PENDING_DIR, TAGS_DIR, WRITES_DIR, version_path
from lamina.spec.slot import FREED_DIR, freed_path


@dataclass
class FsckReport:
    version: int
    checked_files: int = 0
    missing: list[str] = field(default_factory=list)  # referenced by the latest version but absent
    unreferenced: list[str] = field(default_factory=list)  # present but referenced by no version
    errors: list[str] = field(default_factory=list)  # damaged metadata: versions, tombstones, records

    @property
    def ok(self) -> bool:
        return not self.missing and not self.errors


def fsck(table) -> FsckReport:
    io, log = table.io, table.log
    latest = log.latest()
    report = FsckReport(latest.version)
    present = {o.path: o.size for o in io.walk()}
    # 1. the latest version: every reference exists
    try:
        root = root_of(io, latest)
        latest_refs = set(manifest_paths(io, latest, root).to_pylist()) | set(
            referenced_files(live_entries(io, latest, root)).to_pylist()
        )
    except CorruptMetadata as e:
        report.errors.append(f"version {latest.version}: {e}")
        latest_refs = set()
    for p in sorted(latest_refs):
        report.checked_files += 1
        if p not in present:
            report.missing.append(p)
    # 2. every slot holds a readable version or a tombstone (told apart by content)
    referenced = {HINT_PATH} | latest_refs
    try:
        slots = log.scan_slots()
    except CorruptMetadata as e:
        report.errors.append(str(e))
        slots = None
    loaded = []  # the versions that read, for step 3 (each is loaded once)
    if slots is not None:
        for v in slots.versions:
            try:
                loaded.append(log.load(v, check_freed=False))
            except CorruptMetadata as e:
                report.errors.append(f"version {v}: {e}")
            except LaminaError:
                pass  # expired meanwhile
        referenced.update(version_path(v) for v in slots.versions + list(slots.tombstones))
        referenced.update(freed_path(a, b) for a, b in slots.freed)
        for a, b in slots.freed:
            try:
                log.freed_record(a, b - a + 1)
            except CorruptMetadata as e:
                report.errors.append(str(e))
        # slots.strays (puts that landed in freed slots) stay unreferenced: expiry deletes them
    # 3. everything a kept version references
    try:
        referenced.update(paths_of(io, kept_versions(io, log, loaded if slots is not None else None)).to_pylist())
    except LaminaError as e:
        report.errors.append(str(e))
    meta = (f"{TAGS_DIR}/", f"{WRITES_DIR}/", f"{PENDING_DIR}/", f"{FREED_DIR}/")
    report.unreferenced = sorted(p for p in present if p not in referenced and not p.startswith(meta))
    return report
