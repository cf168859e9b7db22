"""The version manifest: one immutable JSON document per commit (seed 000).

Its put-if-absent under ``_lamina/versions/<20 digits>.json`` is the commit
point. Everything it references was written before it under unique names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from lamina.errors import CorruptMetadata
from lamina.spec.layout import FORMAT_VERSION
from lamina.spec.partition import PartitionSpec
from lamina.spec.schema import Schema


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

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format_version": self.format_version,
                "version": self.version,
                "parent_version": self.parent_version,
                "table_uuid": self.table_uuid,
                "timestamp_ms": self.timestamp_ms,
                "operation": self.operation,
                "summary": self.summary,
                "schema": self.schema.to_json(),
                "partition_spec": self.partition_spec.to_json(),
                "properties": self.properties,
                "root_manifest": self.root_manifest,
                "reader_features": list(self.reader_features),
                "writer_features": list(self.writer_features),
                "commit_id": self.commit_id,
                "app_transactions": self.app_transactions,
                **({} if self.last_readd_version is None else {"last_readd_version": self.last_readd_version}),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "VersionManifest":
        try:
            j = json.loads(data)
            if not isinstance(j, dict):
                raise TypeError("not a JSON object")
            return cls(
                version=int(j["version"]),
                parent_version=None if j["parent_version"] is None else int(j["parent_version"]),
                table_uuid=str(j["table_uuid"]),
                timestamp_ms=int(j["timestamp_ms"]),
                operation=str(j["operation"]),
                summary=dict(j["summary"]),
                schema=_cached(Schema.from_json, j["schema"]),
                partition_spec=_cached(PartitionSpec.from_json, j["partition_spec"]),
                properties={str(k): str(v) for k, v in j["properties"].items()},
                root_manifest=j["root_manifest"],
                reader_features=tuple(j["reader_features"]),
                writer_features=tuple(j["writer_features"]),
                commit_id=str(j["commit_id"]),
                format_version=int(j["format_version"]),
                app_transactions={str(k): int(v) for k, v in j.get("app_transactions", {}).items()},
                last_readd_version=None if j.get("last_readd_version") is None else int(j["last_readd_version"]),
            )
        except CorruptMetadata as e:
            raise CorruptMetadata(f"{where}: {e}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptMetadata(
                f"version manifest {where} is corrupt or truncated ({type(e).__name__}: {e}); "
                "restore it from a backup, or roll back to an earlier version"
            ) from None

    def next(self, **changes: Any) -> "VersionManifest":
        return replace(self, **changes)
