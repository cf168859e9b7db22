"""What the tests read of a table's files: every file with its bytes ("nothing changed"
compares two of these), row ids, and file ages set by hand (no sleeps)."""

from __future__ import annotations

import os
import time

import pyarrow as pa

import lamina

from lamina.commit import flush_hints
from lamina.spec.layout import is_inline_root


def table_files(root: str) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes, once the background version hints are written."""
    flush_hints()
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def ids_of(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def set_age(path: str, days: float) -> None:
    """Make ``path`` look ``days`` old (its modification time)."""
    t = time.time() - days * 86400
    os.utime(path, (t, t))


def referenced(t: lamina.Table) -> set[str]:
    """Every data, DV and manifest file a surviving version or a tag references, from the
    public system tables ($files, $manifests; a root its version manifest carries is no file)."""
    out: set[str] = set()
    points = [{"version": h["version"]} for h in t.history()] + [{"version": tg.name} for tg in t.tags.list()]
    for at in points:
        files = t.inspect.files(**at)
        out.update(files.column("path").to_pylist())
        out.update(p for p in files.column("dv_path").to_pylist() if p is not None)
        out.update(p for p in t.inspect.manifests(**at).column("path").to_pylist() if not is_inline_root(p))
    return out


def stored_files(root: str) -> set[str]:
    """The files expiry and orphan cleanup may delete: data files, deletion vectors, manifests."""
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            rel = os.path.relpath(os.path.join(d, f), root)
            if rel.startswith("data/") or rel.startswith("_lamina/manifests/"):
                out.add(rel)
    return out


def referenced_by(t: lamina.Table, **at) -> set[str]:
    """The data, DV and manifest files of one version (``at``: version=, a number or a tag name) by its system tables."""
    f = t.inspect.files(**at)
    files = f.column("path").to_pylist() + [p for p in f.column("dv_path").to_pylist() if p]
    return set(files) | {p for p in t.inspect.manifests(**at).column("path").to_pylist() if not is_inline_root(p)}


def rewrite_manifest(path: str, edit) -> None:
    """Replace the manifest file at ``path`` with ``edit`` of its entries, in its own format (an
    Arrow IPC root, ``.arrow``, or Parquet): a test corrupting what a manifest records."""
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    if path.endswith(".arrow"):
        with open(path, "rb") as f:
            entries = ipc.open_file(pa.py_buffer(f.read())).read_all()
        entries = edit(entries)
        with ipc.new_file(path, entries.schema) as w:
            w.write_table(entries)
    else:
        pq.write_table(edit(pq.read_table(path)), path)


def rewrite_root(t: lamina.Table, edit) -> None:
    """Replace the latest version's root manifest with ``edit`` of its entries, where it is: in
    its file (``rewrite_manifest``), or in the version manifest that carries it (feature
    inline-root-manifests: the version file is rewritten with the new root's bytes)."""
    import base64
    import json

    import pyarrow.ipc as ipc

    from lamina.spec.layout import version_path

    vm = t.metadata
    if not is_inline_root(vm.root_manifest):
        rewrite_manifest(os.path.join(t.uri, vm.root_manifest), edit)
        return
    entries = edit(ipc.open_stream(pa.py_buffer(vm.root_inline)).read_all())
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, entries.schema) as w:
        w.write_table(entries)
    path = os.path.join(t.uri, version_path(vm.version))
    with open(path, "rb") as f:
        j = json.loads(f.read())
    j["root_inline"] = base64.b64encode(sink.getvalue().to_pybytes()).decode()
    with open(path, "wb") as f:
        f.write(json.dumps(j, separators=(",", ":")).encode())
