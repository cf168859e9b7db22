"""The version hint ``_latest_version.json`` (docs/format.md, "The version hint").

Rewritten after each commit, so it may be stale, missing or (after a crash
mid-write on stores without atomic overwrite) unreadable; readers only ever
use it as a starting point and confirm it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

HINT_FORMAT = 1


@dataclass(frozen=True)
class VersionHint:
    version: int
    manifest_path: str
    table_uuid: str
    table_identifier: str | None
    timestamp_ms: int
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]
    format_version: int

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "hint_format": HINT_FORMAT,
                "version": self.version,
                "manifest_path": self.manifest_path,
                "table_uuid": self.table_uuid,
                "table_identifier": self.table_identifier,
                "ordinal": self.version,
                "timestamp_ms": self.timestamp_ms,
                "reader_features": list(self.reader_features),
                "writer_features": list(self.writer_features),
                "format_version": self.format_version,
            }
        ).encode()

    @classmethod
    def parse(cls, data: bytes) -> VersionHint | None:
        """The hint, or None if it is unreadable (callers then fall back to listing)."""
        try:
            j: dict[str, Any] = json.loads(data)
            return cls(
                version=int(j["version"]),
                manifest_path=str(j["manifest_path"]),
                table_uuid=str(j["table_uuid"]),
                table_identifier=j.get("table_identifier"),
                timestamp_ms=int(j["timestamp_ms"]),
                reader_features=tuple(j["reader_features"]),
                writer_features=tuple(j["writer_features"]),
                format_version=int(j["format_version"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
