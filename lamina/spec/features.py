"""Reader and writer feature flags (docs/format.md, "Feature flags").

A table lists the features a reader must understand to read it correctly and
those a writer must understand to change it. Anything not in the sets below is
refused with an error naming the feature, instead of being misread.
"""

from __future__ import annotations

from collections.abc import Iterable

from lamina.errors import UnsupportedFeature
from lamina.spec.lineage import ROW_LINEAGE

# Features this build of Lamina implements.
# Reader and writer feature of tables whose root manifests are Arrow IPC files (``.arrow``)
# rather than Parquet: a root is rewritten on every commit and is small, and Arrow IPC encodes it
# without Parquet's writer set-up (much of a small append's time). Leaves stay Parquet (but
# see arrow-leaf-manifests). New
# tables have it unless ``manifest.root-format`` is ``parquet`` at creation; a reader without
# it could not read such a root, so it must refuse the table.
ARROW_ROOT_MANIFESTS = "arrow-root-manifests"
# Reader and writer feature of tables whose version manifests may carry their root manifest
# (its Arrow IPC bytes, base64, in ``root_inline``) instead of naming a root file: one object
# fewer per commit (a new file on local disk, a request on object stores). A reader without it
# would find no file under the root's name, so it must refuse the table. Implies
# arrow-root-manifests (a root too large to carry is an Arrow IPC file).
INLINE_ROOT_MANIFESTS = "inline-root-manifests"
# Reader and writer feature of tables whose small leaf manifests (at most ARROW_LEAF_MAX_FILES
# entries) are Arrow IPC files (``.arrow``) like roots; larger leaves stay Parquet (lz4,
# read by column). A row-level change rewrites the leaves holding its files, and a plan
# reads them: a small leaf encodes and decodes as Arrow IPC for a fraction of Parquet's fixed
# cost, in about the same bytes. New tables have it unless
# ``manifest.leaf-format`` is ``parquet`` at creation; a reader without it could not read
# such a leaf, so it must refuse the table.
ARROW_LEAF_MANIFESTS = "arrow-leaf-manifests"
ARROW_LEAF_MAX_FILES = 1024

# Reader and writer feature of tables whose entries reference files the table does not own
# (format.md, "External files"): data files adopted in place by ``lamina.convert`` or
# registered by ``add_files`` from outside ``data/``, by a path relative to the root outside
# ``data/`` or by an absolute location. A reader without it could not open an absolute
# location; a writer without it would delete such files (expiry, orphan cleanup, purge),
# which belong to another table or to nobody.
EXTERNAL_FILES = "external-files"

KNOWN_READER_FEATURES: frozenset[str] = frozenset(
    {
        "manifest-tree-v1",
        "hidden-partitioning",
        "column-mapping",
        ARROW_ROOT_MANIFESTS,
        INLINE_ROOT_MANIFESTS,
        ARROW_LEAF_MANIFESTS,
        EXTERNAL_FILES,
    }
)
KNOWN_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        "manifest-tree-v1",
        "hidden-partitioning",
        "monotonic-timestamps",
        "catalog-commits",
        "slot-tombstones",
        "column-mapping",
        "partition-evolution",
        "sort-orders",
        ROW_LINEAGE,
        "branches",
        ARROW_ROOT_MANIFESTS,
        INLINE_ROOT_MANIFESTS,
        "slot-range-records",
        ARROW_LEAF_MANIFESTS,
        EXTERNAL_FILES,
    }
)

# Writer feature of tables whose commit point is their catalog row (lamina.catalog's SQL
# coordinator): a writer that opened the table by path must not put-if-absent versions
# behind the catalog's back (the catalog would later publish a different version there).
CATALOG_COMMITS = "catalog-commits"

# Writer feature of tables whose expired version slots keep tombstones and are freed only
# with a freed-slot record, which every writer checks after its put lands (lamina.spec.slot).
# A writer without that check could be told it committed into a freed slot; expiry frees
# slots only on tables whose latest version lists this feature, and writers add it.
SLOT_TOMBSTONES = "slot-tombstones"

# Writer feature of tables whose expiry marks versions expired with one range record per chunk
# of slots (``freed/<chunk>/<first>-<last>-<at>.json``, naming each slot's first occupant)
# instead of a tombstone per slot, and deletes the slot files a retention later
# (lamina.spec.slot). Every writer and reader looks the records up: a writer that checked
# only tombstones and freed-chunk records could acknowledge a put that landed in a freed slot,
# or tag an expired version. Writers add it (with ``slot-tombstones``, whose tombstones a
# destructive rollback still writes); expiry writes range records only on tables that have it.
SLOT_RANGE_RECORDS = "slot-range-records"

# Reader and writer feature of tables whose schema evolved so that data files' columns must
# be mapped, not read by name as they are (lamina.spec.schema): a renamed column's values
# keep their old name in the files, an added one has a fresh physical name, a column may
# read a default where a file lacks it. A reader that read columns by name would return
# wrong values, so it must refuse the table.
COLUMN_MAPPING = "column-mapping"

# Reader and writer feature of partitioned tables (partition values derived by transforms).
HIDDEN_PARTITIONING = "hidden-partitioning"

# Writer feature of tables that have had more than one partition spec (``partition_specs``
# in the version manifest): a writer that did not carry the list forward, and the older
# specs' partition bounds in the manifests it rewrites, would lose what files written under
# them are pruned by. Readers need nothing: a partition field id means the same in every
# spec, and a file without a field's bounds is never pruned by it.
PARTITION_EVOLUTION = "partition-evolution"

# Writer feature of tables whose sort order is set in the version manifest (``sort_order``,
# by field id): a writer must carry it forward and sort what it writes by it.
SORT_ORDERS = "sort-orders"


# Writer feature of tables that have (or had) branches (lamina.spec.branch): a writer must keep
# every file a branch's retained versions and base need when it expires versions, deletes
# tags or cleans up orphans, which a writer that knows no branches would not see.
BRANCHES = "branches"


def with_features(features: tuple[str, ...], *needed: str) -> tuple[str, ...]:
    """``features`` plus those of ``needed`` it lacks."""
    return features + tuple(f for f in dict.fromkeys(needed) if f not in features)


# What a new table gets.
DEFAULT_READER_FEATURES: tuple[str, ...] = ("manifest-tree-v1",)
DEFAULT_WRITER_FEATURES: tuple[str, ...] = (
    "manifest-tree-v1",
    "monotonic-timestamps",
    SLOT_TOMBSTONES,
    SLOT_RANGE_RECORDS,
)
# Row lineage (lamina.spec.lineage) is the default for new tables too, unless their
# ``row-lineage.enabled`` property says "false"; ``initial_version`` adds it.


def _check(kind: str, known: frozenset[str], features: Iterable[str], where: str, advice: str) -> None:
    unknown = sorted(set(features) - known)
    if unknown:
        raise UnsupportedFeature(
            f"{where} requires {kind} feature(s) {unknown} that this Lamina does not support; {advice}"
        )


def check_reader(features: Iterable[str], where: str) -> None:
    _check("reader", KNOWN_READER_FEATURES, features, where, "upgrade lamina to read this table")


def check_writer(features: Iterable[str], where: str) -> None:
    _check(
        "writer",
        KNOWN_WRITER_FEATURES,
        features,
        where,
        "upgrade lamina before writing to this table (reading may still work)",
    )
