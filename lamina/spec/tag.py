"""Tags (seed 003): named, self-contained references to a version.

A tag file ``_lamina/tags/<name>.json`` holds a full copy of the tagged
version manifest, so the tag keeps working after expiry deletes that
version's own file: its root manifest, leaves and data files are kept by
expiry for as long as the tag exists.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from lamina.errors import CorruptMetadata, InvalidTagName
from lamina.spec.layout import TAGS_DIR
from lamina.spec.version import VersionManifest

MAX_TAG_NAME = 200
# Letters, digits and a few separators; no '/', no '..', no control characters.
_ALLOWED = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+=@-]*")


def validate_tag_name(name: Any) -> str:
    """The name, or InvalidTagName saying what is wrong with it."""
    if not isinstance(name, str):
        raise InvalidTagName(f"a tag name must be a string, not {type(name).__name__}")
    what = f"tag name {name!r}"
    if not name:
        raise InvalidTagName("a tag name must not be empty")
    if len(name) > MAX_TAG_NAME:
        raise InvalidTagName(f"{what[:60]}... is {len(name)} characters; the limit is {MAX_TAG_NAME}")
    if name.isdigit() or (name[0] in "+-" and name[1:].isdigit()):
        raise InvalidTagName(f"{what} is a number, which would be read as a version; add a letter (e.g. 'v{name}')")
    if name.startswith("."):
        raise InvalidTagName(f"{what} starts with '.'; hidden names are reserved")
    if ".." in name:
        raise InvalidTagName(f"{what} contains '..'")
    if not _ALLOWED.fullmatch(name):
        bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "_.:+=@-"))})
        raise InvalidTagName(
            f"{what} contains {''.join(bad)!r}; use letters, digits and _ . : + = @ - (starting with a letter or digit)"
        )
    return name


def tag_path(name: str) -> str:
    return f"{TAGS_DIR}/{validate_tag_name(name)}.json"


@dataclass(frozen=True)
class Tag:
    name: str
    version: VersionManifest  # the tagged version, copied whole
    created_at_ms: int
    expires_at_ms: int | None = None  # removed by expiry after this time; None = kept until deleted
    automatic: bool = False  # created by the table's automatic-tag property

    @property
    def tagged_version(self) -> int:
        return self.version.version

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "tag_format": 1,
                "name": self.name,
                "tagged_version": self.version.version,
                "created_at_ms": self.created_at_ms,
                "expires_at_ms": self.expires_at_ms,
                "automatic": self.automatic,
                "version_manifest": json.loads(self.version.to_json()),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "Tag":
        try:
            j = json.loads(data)
            vm = VersionManifest.from_json(json.dumps(j["version_manifest"]).encode(), where)
            if int(j["tagged_version"]) != vm.version:
                raise ValueError(f"tagged_version {j['tagged_version']} != manifest version {vm.version}")
            return cls(
                name=str(j["name"]),
                version=vm,
                created_at_ms=int(j["created_at_ms"]),
                expires_at_ms=None if j.get("expires_at_ms") is None else int(j["expires_at_ms"]),
                automatic=bool(j.get("automatic", False)),
            )
        except CorruptMetadata:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptMetadata(
                f"tag file {where} is corrupt ({type(e).__name__}: {e}); delete it with `lamina tag delete` "
                "and re-create it from a version"
            ) from None
