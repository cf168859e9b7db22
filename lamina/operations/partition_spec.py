"""Partition evolution: ``UpdateSpec`` and the fluent ``SpecUpdate`` builder.

    with table.update_spec() as u:
        u.add_field("ts", "hour")             # or u.add_field("hour(ts)")
        u.remove_field("ts_day")
        u.rename_field("id_bucket_16", "shard")

A spec change is one version and metadata only (Iceberg semantics): the table keeps
every spec it has had, data files keep the spec they were written with (their
entries' ``spec_id``), new writes use the new spec, and planning prunes each file by
the partition fields of its own spec. Compaction rewrites files into the current spec.

Ids: the new spec takes the next spec id (max + 1); a spec whose fields equal an earlier
spec's takes that spec's id again. A new partition field takes a field id no spec of the
table has used, except that a field with the source and transform of a field an earlier
spec had gets that field's id back (its bounds, kept in the manifests, mean the same).

Conflicts: the change is planned against the table's list of specs; at commit, if another
spec change landed meanwhile, it fails with CommitConflict (nothing committed: look at
the new spec and make the change again). Appends, deletes, merges and compactions never
conflict with it: their files keep the spec they were written with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lamina.commit.base import REMOVED_SCHEMA, Base, Change, Operation
from lamina.commit.checks import require_spec_sources_live, require_spec_unchanged
from lamina.commit.result import CommitResult
from lamina.errors import InvalidArgument, InvalidPartitionSpec, SchemaMismatch
from lamina.spec.partition import (
    FIRST_PARTITION_FIELD_ID,
    PartitionField,
    PartitionSpec,
    check_field_name,
    default_field_name,
    source_and_transform,
)
from lamina.spec.schema import Schema
from lamina.spec.transforms import normalize_transform, transform_result_type
from lamina.spec.version import VersionManifest


class UpdateSpec(Operation):
    """Make ``spec`` the table's partition spec; planned against the specs ``planned``."""

    conflict_checks = (require_spec_unchanged, require_spec_sources_live)

    def __init__(self, spec: PartitionSpec, planned: tuple[PartitionSpec, ...], changes: list[str]) -> None:
        self.spec = spec
        self.planned = planned
        self.changes = changes

    def apply(self, base: Base) -> Change:
        require_spec_unchanged(base.metadata, self.planned, self.changes)
        require_spec_sources_live(self.spec, base.schema)  # a concurrent schema change may have dropped a source
        summary = {"spec-id": self.spec.spec_id, "spec-changes": "; ".join(self.changes)}
        return Change("update-spec", base.empty(), REMOVED_SCHEMA.empty_table(), summary, partition_spec=self.spec)


class MetadataBuilder:
    """What the fluent builders of metadata changes share: ``commit()`` once (or leave a
    ``with`` block without an exception), after which the builder is spent."""

    def __init__(self, run: Callable[[Operation], CommitResult | None]) -> None:
        self._run = run
        self._done = False

    def _check_open(self) -> None:
        if self._done:
            raise InvalidArgument(f"this {type(self).__name__} was already committed; start a new one")

    def operation(self) -> Operation:
        raise NotImplementedError

    def commit(self) -> CommitResult | None:
        """Commit the change as one version (its ``CommitResult``), or queue it in the transaction (None)."""
        self._check_open()
        op = self.operation()
        self._done = True
        return self._run(op)

    def __enter__(self) -> MetadataBuilder:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and not self._done:
            self.commit()


class SpecUpdate(MetadataBuilder):
    """Fluent builder of one partition spec change (``Table.update_spec``,
    ``Transaction.update_spec``). Every call is checked at once against the spec so far."""

    def __init__(self, metadata: VersionManifest, run: Callable[[Operation], CommitResult | None]) -> None:
        super().__init__(run)
        self._schema: Schema = metadata.schema
        self._specs = metadata.all_partition_specs
        self._base = metadata.partition_spec
        self._fields: list[PartitionField] = list(self._base.fields)
        self._changes: list[str] = []
        used = [f.field_id for s in self._specs for f in s.fields]
        self._next_id = max(used, default=FIRST_PARTITION_FIELD_ID - 1) + 1

    @property
    def spec(self) -> PartitionSpec:
        """The spec as the changes so far make it (its id is assigned at commit)."""
        return PartitionSpec(self._spec_id(), tuple(self._fields))

    def _find(self, name: str) -> int:
        for i, f in enumerate(self._fields):
            if f.name == name:
                return i
        if isinstance(name, str) and name.strip():
            try:  # a term as partition_by spells it: remove_field("day(ts)")
                src, transform = source_and_transform(name, self._schema)
            except (InvalidPartitionSpec, SchemaMismatch):
                pass
            else:
                sid = self._schema.field_id(src.name)
                for i, f in enumerate(self._fields):
                    if (f.source_id, f.transform) == (sid, transform):
                        return i
        raise InvalidPartitionSpec(
            f"no partition field {name!r} in the table's partition spec; its fields are {[f.name for f in self._fields]}"
        )

    def _check_name(self, name: str, source: pa.Field, transform: str, skip: int | None = None) -> None:
        check_field_name(name, source, transform, self._schema, f"for {transform}({source.name})")
        if any(f.name == name for i, f in enumerate(self._fields) if i != skip):
            raise InvalidPartitionSpec(f"the partition spec already has a field named {name!r}; choose another name")

    def add_field(self, source: str, transform: str | None = None, name: str | None = None) -> SpecUpdate:
        """Partition new writes also by ``transform`` of column ``source``: ``add_field("ts", "day")``,
        ``add_field("id", "bucket[16]")``, or one ``partition_by`` entry: ``add_field("bucket(16, id)")``.
        ``name``: the partition field's name (default as ``partition_by`` names it)."""
        self._check_open()
        if transform is None:
            if not isinstance(source, str):
                raise InvalidPartitionSpec(f"add_field needs a column name or a partition_by entry, got {source!r}")
            src, transform = source_and_transform(source, self._schema)
        else:
            if not isinstance(source, str) or source not in self._schema.names:
                raise InvalidPartitionSpec(
                    f"unknown column {source!r} to partition by; columns are {self._schema.names}"
                )
            src = self._schema.field(source)
            transform = normalize_transform(transform)
            try:
                transform_result_type(transform, src.type)
            except InvalidPartitionSpec as e:
                raise InvalidPartitionSpec(
                    f"cannot partition by {transform}({src.name}): column {src.name!r} is {src.type}; {e}"
                ) from None
        sid = self._schema.field_id(src.name)
        same = [f for f in self._fields if (f.source_id, f.transform) == (sid, transform)]
        if same:
            raise InvalidPartitionSpec(
                f"the partition spec already has {transform}({src.name}) (field {same[0].name!r}); nothing to add"
            )
        name = default_field_name(src.name, transform) if name is None else name
        self._check_name(name, src, transform)
        # A field an earlier spec had (same source and transform) gets its id back: the bounds
        # files written under that spec keep for it mean the same.
        earlier = [f.field_id for s in self._specs for f in s.fields if (f.source_id, f.transform) == (sid, transform)]
        if earlier:
            field_id = earlier[0]
        else:
            field_id = self._next_id
            self._next_id += 1
        self._fields.append(PartitionField(sid, field_id, name, transform))
        self._changes.append(f"add {name}={transform}({src.name})")
        return self

    def remove_field(self, name: str) -> SpecUpdate:
        """Stop partitioning new writes by the field ``name`` (or a term: ``"day(ts)"``). Files
        written before keep it, and are still pruned by it."""
        self._check_open()
        i = self._find(name)
        self._changes.append(f"remove {self._fields[i].name}")
        del self._fields[i]
        return self

    def rename_field(self, name: str, new_name: str) -> SpecUpdate:
        """Rename partition field ``name`` (its id, and so its meaning in old files, stays)."""
        self._check_open()
        i = self._find(name)
        f = self._fields[i]
        source = self._schema.field(self._schema.name_of(f.source_id))
        self._check_name(new_name, source, f.transform, skip=i)
        self._fields[i] = PartitionField(f.source_id, f.field_id, new_name, f.transform)
        self._changes.append(f"rename {f.name} to {new_name}")
        return self

    def _spec_id(self) -> int:
        fields = tuple(self._fields)
        for s in self._specs:
            if s.fields == fields:
                return s.spec_id  # back to an earlier spec: its id again
        return max(s.spec_id for s in self._specs) + 1

    def operation(self) -> UpdateSpec:
        if tuple(self._fields) == self._base.fields:
            raise InvalidArgument("the partition spec update changes nothing; nothing was committed")
        return UpdateSpec(self.spec, self._specs, self._changes)
