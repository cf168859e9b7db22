"""fsck: does every reference of the latest version exist, and what is unreferenced?

Unreferenced = under the table root but referenced by no existing version (its
version manifest, root, leaves, data files). Those are what crashed or losing
writers leave behind; they are never visible to readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow.compute as pc

from lamina.errors import CorruptMetadata, LaminaError
from lamina.manifest.files import read_manifests
from lamina.manifest.tree import load_root
from lamina.spec import content as C
from lamina.spec.layout import HINT_PATH, version_path


@dataclass
class FsckReport:
    version: int
    checked_files: int = 0
    missing: list[str] = field(default_factory=list)  # referenced by the latest version but absent
    unreferenced: list[str] = field(default_factory=list)  # present but referenced by no version
    errors: list[str] = field(default_factory=list)  # versions that could not be read

    @property
    def ok(self) -> bool:
        return not self.missing and not self.errors


def _referenced(table, vm) -> tuple[set[str], set[str]]:
    """(manifest paths, data file paths) a version references."""
    mschema = table._mschema_of(vm)
    root = load_root(table.io, vm.root_manifest, mschema)
    manifests = {vm.root_manifest} if vm.root_manifest else set()
    is_leaf = pc.equal(root.column("content"), C.LEAF)
    leaf_paths = root.filter(is_leaf).column("path").to_pylist()
    manifests.update(leaf_paths)
    parts = [root.filter(pc.invert(is_leaf))]
    parts += read_manifests(table.io, leaf_paths)
    data: set[str] = set()
    for t in parts:
        live = t.filter(pc.not_equal(t.column("status"), C.REMOVED))
        data.update(live.column("path").to_pylist())
        if "dv_path" in live.column_names:
            data.update(p for p in live.column("dv_path").to_pylist() if p)
    return manifests, data


def fsck(table) -> FsckReport:
    latest = table.log.latest()
    report = FsckReport(latest.version)
    present = {o.path: o.size for o in table.io.walk()}
    # 1. the latest version: every reference exists
    try:
        manifests, data = _referenced(table, latest)
    except CorruptMetadata as e:
        report.errors.append(f"version {latest.version}: {e}")
        manifests, data = set(), set()
    for p in sorted(manifests | data):
        report.checked_files += 1
        if p not in present:
            report.missing.append(p)
    # 2. everything any existing version or tag references
    from lamina.maintenance.reachability import referenced_paths

    referenced = {HINT_PATH} | manifests | data
    referenced.update(version_path(v) for v in table.log.list_versions())
    try:
        referenced.update(referenced_paths(table.io, table.log).to_pylist())
    except LaminaError as e:
        report.errors.append(str(e))
    meta = ("_lamina/tags/", "_lamina/writes/")
    report.unreferenced = sorted(p for p in present if p not in referenced and not p.startswith(meta))
    return report
