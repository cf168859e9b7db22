"""The version manifest: one immutable JSON document per commit.

Its put-if-absent under ``_lamina/versions/<20 digits>.json`` is the commit
point. Everything it references was written before it under unique names.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from lamina.errors import CorruptMetadata
from lamina.spec.layout import FORMAT_VERSION, INLINE_ROOT_SUFFIX, is_inline_root
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema
from lamina.spec.sort import SortOrder
from lamina.timeutil import iso_ms


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


@lru_cache(maxsize=64)
def _encoded(part: Any) -> str:
    """The JSON text of an immutable part of a version manifest (a schema, a partition spec)."""
    return _dumps(part.to_json())


# Consecutive versions almost always share one schema and spec: parse each distinct
# one once (both are immutable), which halves the cost of loading many versions.
_parsed: dict[tuple[Any, str], Any] = {}


def _cached(parse: Any, j: Any) -> Any:
    key = (parse, json.dumps(j, separators=(",", ":")))
    hit = _parsed.get(key)
    if hit is None:
        if len(_parsed) > 256:
            _parsed.clear()
        hit = _parsed[key] = parse(j)
    return hit


def _parse_specs(j: Any) -> tuple[PartitionSpec, ...]:
    """A table's partition specs, oldest first: ids unique and rising, and a field id
    means one (source, transform) in every spec (pruning and manifests key by it)."""
    if not isinstance(j, list) or len(j) < 2:
        raise CorruptMetadata("partition_specs must list at least two specs (one is stored as partition_spec alone)")
    specs = tuple(PartitionSpec.from_json(s) for s in j)
    ids = [s.spec_id for s in specs]
    if ids != sorted(set(ids)):
        raise CorruptMetadata(f"partition_specs has spec ids {ids}; they must be unique and ascending")
    meaning: dict[int, tuple[int, str]] = {}
    for s in specs:
        for f in s.fields:
            if meaning.setdefault(f.field_id, (f.source_id, f.transform)) != (f.source_id, f.transform):
                raise CorruptMetadata(f"partition field id {f.field_id} means different things in different specs")
    return specs


def _block_commits(j: Any) -> tuple[str, ...] | None:
    # Entries are checked where they are used (expiry): a damaged one costs reads, not a load.
    if j is None:
        return None
    if not isinstance(j, list) or not all(isinstance(e, str) for e in j):
        raise CorruptMetadata("block_commits must be a list of strings")
    return tuple(j)


@dataclass(frozen=True)
class VersionManifest:
    version: int
    parent_version: int | None
    table_uuid: str
    timestamp_ms: int
    operation: str
    summary: dict[str, Any]
    schema: Schema
    partition_spec: PartitionSpec
    properties: dict[str, str]
    root_manifest: str | None  # None: the table has no files at this version
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]
    commit_id: str
    format_version: int = FORMAT_VERSION
    # Idempotence records (e.g. streaming query id -> last batch id), carried forward.
    app_transactions: dict[str, int] = field(default_factory=dict)
    # The newest version that re-added files an earlier version had removed (a
    # rollback), carried forward. Expiry reasons about a data file from the one
    # interval [added, removed) its manifests record; a re-added file has several,
    # so on such a table expiry falls back to the full reachability walk.
    last_readd_version: int | None = None
    # Every partition spec the table has had, oldest first, the current one included; empty
    # while the table has had only ``partition_spec`` (stored only when there are several).
    # Data files keep the spec they were written with (their entries' ``spec_id``).
    partition_specs: tuple[PartitionSpec, ...] = ()
    # The sort order writers use, by field id; None: the ``write.sort-order`` property's, if
    # set (``lamina.spec.sort.effective_sort_order``).
    sort_order: SortOrder | None = None
    # Row lineage (lamina.spec.lineage): the first row id the next added row gets; None on a
    # table without lineage.
    next_row_id: int | None = None
    # The versions before this one in its block of COMMIT_BLOCK (lamina.spec.slot), oldest first:
    # each one's short commit id and flags (``block_entry``), so expiry learns who occupied a
    # block's slots, and which of them removed files or wrote leaves, from one version; () at a
    # block's first version; None where unknown (the base was written without it).
    block_commits: tuple[str, ...] | None = None
    # The root manifest's Arrow IPC bytes when this version carries it (feature
    # inline-root-manifests; ``root_manifest`` then names it: lamina.spec.layout.is_inline_root).
    root_inline: bytes | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """One line: the version, its parent, what made it, when, and its size (not its schema, properties, ...)."""
        s = self.summary
        return (
            f"VersionManifest(version={self.version}, parent_version={self.parent_version}, operation={self.operation!r}, "
            f"committed={iso_ms(self.timestamp_ms)}, files={s.get('total-files')}, records={s.get('total-records')}, "
            f"schema_id={self.schema.schema_id})"
        )

    @property
    def all_partition_specs(self) -> tuple[PartitionSpec, ...]:
        """Every spec of the table, oldest first (the current one included)."""
        return self.partition_specs or (self.partition_spec,)

    def to_json(self) -> bytes:
        # The bytes of json.dumps of the whole object (compact separators), with the schema and
        # partition spec, the same for every version of a run of commits (and large for a wide
        # table), encoded once per object rather than on every commit.
        head = _dumps(
            {
                "format_version": self.format_version,
                "version": self.version,
                "parent_version": self.parent_version,
                "table_uuid": self.table_uuid,
                "timestamp_ms": self.timestamp_ms,
                "operation": self.operation,
                "summary": self.summary,
            }
        )
        tail = _dumps(
            {
                "properties": self.properties,
                "root_manifest": self.root_manifest,
                "reader_features": list(self.reader_features),
                "writer_features": list(self.writer_features),
                "commit_id": self.commit_id,
                "app_transactions": self.app_transactions,
                **({} if self.last_readd_version is None else {"last_readd_version": self.last_readd_version}),
                **(
                    {}
                    if len(self.partition_specs) < 2
                    else {"partition_specs": [p.to_json() for p in self.partition_specs]}
                ),
                **({} if self.sort_order is None else {"sort_order": self.sort_order.to_json()}),
                **({} if self.next_row_id is None else {"next_row_id": self.next_row_id}),
                **({} if self.block_commits is None else {"block_commits": list(self.block_commits)}),
            }
        )
        out = f'{head[:-1]},"schema":{_encoded(self.schema)},"partition_spec":{_encoded(self.partition_spec)},{tail[1:]}'.encode()
        if self.root_inline is None:
            return out
        # The carried root last, as bytes: base64 needs no JSON escaping, and the largest part of
        # the manifest is then copied once rather than scanned by the encoder and re-encoded.
        return b"".join((out[:-1], b',"root_inline":"', base64.b64encode(self.root_inline), b'"}'))

    @classmethod
    def from_json(cls, data: bytes, where: str) -> VersionManifest:
        try:
            j = json.loads(data)
        except ValueError as e:
            raise CorruptMetadata(
                f"version manifest {where} is corrupt or truncated ({type(e).__name__}: {e}); "
                "restore it from a backup, or roll back to an earlier version"
            ) from None
        return cls.from_dict(j, where)

    @classmethod
    def from_dict(cls, j: Any, where: str) -> VersionManifest:
        """A version manifest from its parsed JSON (a tag's or a branch record's copy)."""
        try:
            if not isinstance(j, dict):
                raise TypeError("not a JSON object")
            spec = _cached(PartitionSpec.from_json, j["partition_spec"])
            specs = j.get("partition_specs")
            if specs is not None:
                specs = _cached(_parse_specs, specs)
                if spec not in specs:
                    raise CorruptMetadata(
                        f"the current partition spec (id {spec.spec_id}) is not among partition_specs"
                    )
            order = j.get("sort_order")
            inline = j.get("root_inline")
            if (inline is not None) != is_inline_root(j["root_manifest"]):
                raise CorruptMetadata(
                    f"root_manifest {j['root_manifest']!r} and root_inline disagree: a root carried by the "
                    f"version manifest is named *{INLINE_ROOT_SUFFIX}, and only such a root is carried"
                )
            return cls(
                version=int(j["version"]),
                parent_version=None if j["parent_version"] is None else int(j["parent_version"]),
                table_uuid=str(j["table_uuid"]),
                timestamp_ms=int(j["timestamp_ms"]),
                operation=str(j["operation"]),
                summary=dict(j["summary"]),
                schema=_cached(Schema.from_json, j["schema"]),
                partition_spec=spec,
                properties={str(k): str(v) for k, v in j["properties"].items()},
                root_manifest=j["root_manifest"],
                reader_features=tuple(j["reader_features"]),
                writer_features=tuple(j["writer_features"]),
                commit_id=str(j["commit_id"]),
                format_version=int(j["format_version"]),
                app_transactions={str(k): int(v) for k, v in j.get("app_transactions", {}).items()},
                last_readd_version=None if j.get("last_readd_version") is None else int(j["last_readd_version"]),
                partition_specs=specs or (),
                sort_order=None if order is None else _cached(SortOrder.from_json, order),
                next_row_id=None if j.get("next_row_id") is None else int(j["next_row_id"]),
                block_commits=_block_commits(j.get("block_commits")),
                root_inline=None if inline is None else base64.b64decode(inline, validate=True),
            )
        except CorruptMetadata as e:
            raise CorruptMetadata(f"{where}: {e}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptMetadata(
                f"version manifest {where} is corrupt or truncated ({type(e).__name__}: {e}); "
                "restore it from a backup, or roll back to an earlier version"
            ) from None

    def next(self, **changes: Any) -> VersionManifest:
        """This manifest with ``changes`` (fields), as ``dataclasses.replace`` would make it (a
        commit makes several: this skips replace's per-field introspection). What was worked
        out from this one and cached on it (its manifest schema) is kept when the fields it
        derives from are the same."""
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"VersionManifest has no field(s) {sorted(unknown)}")
        state = dict(self.__dict__)
        if any(k in changes and changes[k] is not state[k] and changes[k] != state[k] for k in _CACHE_DEPENDS_ON):
            for key in _CACHED:
                state.pop(key, None)
        state.update(changes)
        new = object.__new__(VersionManifest)
        new.__dict__.update(state)
        return new


_FIELD_NAMES = frozenset(f.name for f in fields(VersionManifest))
# Attributes computed from a manifest and cached on it (lamina.manifest.entries.manifest_schema_of),
# and the fields they are computed from.
_CACHED = ("_manifest_schema",)
_CACHE_DEPENDS_ON = ("schema", "partition_spec", "partition_specs", "properties", "reader_features", "writer_features")
