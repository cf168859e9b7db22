"""One adapter per system. Every library is imported lazily inside its adapter so a
missing or broken peer only fails its own cells ("error: ...") and never the run.

Each adapter works on a *root directory* it owns (a fresh temp dir per table).

Operations (all take/return an opaque handle `h`):
  create(root, properties)      -> h      empty table with bench SCHEMA
  append(h, data)               -> h      one append = one commit
  open(root)                    -> h      open the latest version
  version(h)                    -> int
  build_files(root, data, rpf)  -> h      one write of `data` split into files of `rpf` rows
  plan(h, lo, hi)               -> int    number of files the system's planner returns
  read_ids(root)                -> np.ndarray of every id in the latest version
"""

from __future__ import annotations

import os
import re

import pyarrow as pa

from common import SCHEMA

PLAN_WHAT = {
    "lamina": "`t.scan(where=...).plan()` → list of FileScanTask (manifest stats pruning)",
    "deltalake": "`dt.file_uris(file_pruning_predicate=...)` on an open `DeltaTable` "
    "(log/checkpoint state is loaded at open; per-file min/max stats pruning)",
    "lance": "`ds.scanner(filter=...).explain_plan()` (builds the physical plan; Lance "
    "keeps no per-fragment column stats in its manifest, so no fragment is pruned; "
    "file count = plan's num_fragments)",
    "pyiceberg": "`table.scan(row_filter=...).plan_files()` materialised to a list "
    "(manifest-list + manifest entry metrics pruning)",
}


def _pred(lo, hi) -> str | None:
    if lo is None:
        return None
    return f"id >= {lo} AND id < {hi}"


class Lamina:
    name = "lamina"

    def _lib(self):
        import lamina

        return lamina

    def create(self, root, properties=None):
        return self._lib().create_table(os.path.join(root, "t"), SCHEMA, properties=properties)

    def append(self, h, data):
        h.append(data)
        return h

    def open(self, root):
        return self._lib().open_table(os.path.join(root, "t"))

    def version(self, h):
        return int(h.version)

    def build_files(self, root, data, rpf):
        h = self.create(root, properties={"write.max-rows-per-file": str(rpf)})
        h.append(data)
        return h

    def plan(self, h, lo=None, hi=None):
        return len(h.scan(where=_pred(lo, hi)).plan())

    def read_ids(self, root):
        t = self.open(root)
        return t.scan(columns=["id"]).to_arrow().column("id").to_numpy()

    # bench 4 only
    def add_files(self, h, files: pa.Table):
        h.add_files(files, check_files=False)  # synthetic entries: there are no files to find
        return h


class DeltaLake:
    name = "deltalake"

    def create(self, root, properties=None):
        from deltalake import DeltaTable

        return DeltaTable.create(os.path.join(root, "t"), schema=SCHEMA, configuration=properties)

    def append(self, h, data):
        from deltalake import write_deltalake

        write_deltalake(h, data, mode="append")
        return h

    def open(self, root):
        from deltalake import DeltaTable

        return DeltaTable(os.path.join(root, "t"))

    def version(self, h):
        return int(h.version())

    def build_files(self, root, data, rpf):
        # deltalake>=1.0 has no max_rows_per_file; its Rust writer checks the file size
        # every 1024 rows (internal write batch), so target_file_size=1 makes files of
        # exactly 1024 rows when the input batches are multiples of 1024 rows.
        from deltalake import WriterProperties, write_deltalake

        if rpf != 1024:
            raise ValueError("deltalake can only split files every 1024 rows")
        reader = pa.RecordBatchReader.from_batches(SCHEMA, data.to_batches(max_chunksize=rpf * 64))
        write_deltalake(
            os.path.join(root, "t"),
            reader,
            target_file_size=1,
            writer_properties=WriterProperties(max_row_group_size=rpf),
        )
        return self.open(root)

    def plan(self, h, lo=None, hi=None):
        return len(h.file_uris(file_pruning_predicate=_pred(lo, hi)))

    def read_ids(self, root):
        dt = self.open(root)
        return dt.to_pyarrow_table(columns=["id"]).column("id").to_numpy()


class Lance:
    name = "lance"

    def create(self, root, properties=None):
        import lance

        return lance.write_dataset(SCHEMA.empty_table(), os.path.join(root, "t.lance"), schema=SCHEMA)

    def append(self, h, data):
        import lance

        return lance.write_dataset(data, h, mode="append")

    def open(self, root):
        import lance

        return lance.dataset(os.path.join(root, "t.lance"))

    def version(self, h):
        return int(h.version)

    def build_files(self, root, data, rpf):
        import lance

        return lance.write_dataset(
            data, os.path.join(root, "t.lance"), max_rows_per_file=rpf, max_rows_per_group=rpf
        )

    def plan(self, h, lo=None, hi=None):
        text = h.scanner(filter=_pred(lo, hi)).explain_plan()
        m = re.search(r"num_fragments=(\d+)", text)
        if not m:
            raise RuntimeError(f"no num_fragments in lance plan: {text[:200]}")
        return int(m.group(1))

    def read_ids(self, root):
        return self.open(root).to_table(columns=["id"]).column("id").to_numpy()


class PyIceberg:
    """SqlCatalog on SQLite (root/catalog.db), local file:// warehouse (root/wh)."""

    name = "pyiceberg"
    IDENT = "bench.t"

    def __init__(self):
        self._catalogs = {}

    def catalog(self, root):
        cat = self._catalogs.get(root)
        if cat is None:
            from pyiceberg.catalog.sql import SqlCatalog

            os.makedirs(os.path.join(root, "wh"), exist_ok=True)
            cat = SqlCatalog(
                "bench",
                uri=f"sqlite:///{os.path.join(root, 'catalog.db')}",
                warehouse=f"file://{os.path.join(root, 'wh')}",
            )
            self._catalogs[root] = cat
        return cat

    def create(self, root, properties=None):
        cat = self.catalog(root)
        try:
            cat.create_namespace("bench")
        except Exception:  # NamespaceAlreadyExistsError
            pass
        return cat.create_table(self.IDENT, schema=SCHEMA, properties=properties or {})

    def append(self, h, data):
        h.append(data)
        return h

    def open(self, root):
        return self.catalog(root).load_table(self.IDENT)

    def version(self, h):
        # no integer versions: use the number of snapshots
        return len(h.metadata.snapshots)

    def build_files(self, root, data, rpf):
        # pyiceberg bin-packs an arrow table by *in-memory* bytes; a target of
        # rpf × average row bytes gives files of exactly rpf rows for this data.
        avg = data.nbytes / data.num_rows
        h = self.create(root, properties={"write.target-file-size-bytes": str(int(avg * rpf))})
        h.append(data)
        return h

    def plan(self, h, lo=None, hi=None):
        pred = _pred(lo, hi)
        scan = h.scan(row_filter=pred) if pred else h.scan()
        return len(list(scan.plan_files()))

    def read_ids(self, root):
        return self.open(root).scan(selected_fields=("id",)).to_arrow().column("id").to_numpy()


SYSTEMS = {"lamina": Lamina, "deltalake": DeltaLake, "lance": Lance, "pyiceberg": PyIceberg}
ORDER = ["lamina", "deltalake", "lance", "pyiceberg"]


def get(name: str):
    return SYSTEMS[name]()


def library_versions() -> dict[str, str]:
    out = {}
    for mod, label in [
        ("lamina", "lamina"),
        ("deltalake", "deltalake"),
        ("lance", "pylance"),
        ("pyiceberg", "pyiceberg"),
        ("pyarrow", "pyarrow"),
    ]:
        try:
            from importlib.metadata import version

            out[label] = version(label)
        except Exception as e:  # noqa: BLE001
            out[label] = f"not installed ({type(e).__name__})"
    return out
