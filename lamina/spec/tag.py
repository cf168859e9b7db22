"""Tags: named, self-contained references to a version.

A tag file ``_lamina/tags/<name>.json`` holds a full copy of the tagged
version manifest, so the tag keeps working after expiry deletes that
version's own file: its root manifest, leaves and data files are kept by
expiry for as long as the tag exists.
"""

from __future__ import annotations

import json
import numbers
import re
from dataclasses import dataclass
from typing import Any

from lamina.errors import CorruptMetadata, InvalidArgument, InvalidTagName
from lamina.spec.layout import MAX_VERSION, TAGS_DIR
from lamina.spec.version import VersionManifest
from lamina.timeutil import iso_ms

MAX_TAG_NAME = 200


_TAG_CHARS = "_.:+=@-"
_VERSION_NUMBER = re.compile(r"[+-]?[0-9]+")


def validate_tag_name(name: Any) -> str:
    """The name, or InvalidTagName saying what is wrong with it."""
    if not isinstance(name, str):
        raise InvalidTagName(f"a tag name must be a string, not {type(name).__name__}")
    what = f"tag name {name!r}"
    rule = f"a tag name is letters, digits and {' '.join(_TAG_CHARS)}, starting with a letter or digit"
    if not name:
        raise InvalidTagName(f"a tag name must not be empty; {rule}")
    if len(name) > MAX_TAG_NAME:
        raise InvalidTagName(f"{what[:60]}... is {len(name)} characters; the limit is {MAX_TAG_NAME}")
    if _VERSION_NUMBER.fullmatch(name):
        raise InvalidTagName(
            f"{what} is a number, which would be read as a version; add a letter (e.g. 'v{name.lstrip('+-')}')"
        )
    if name.startswith("."):
        raise InvalidTagName(f"{what} starts with '.'; hidden names are reserved ({rule})")
    if ".." in name:
        raise InvalidTagName(f"{what} contains '..'; {rule}")
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in _TAG_CHARS))})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise InvalidTagName(f"{what} contains {shown}, which a tag name may not; {rule}")
    if not name[0].isalnum():
        raise InvalidTagName(f"{what} must start with a letter or digit, not {name[0]!r}; {rule}")
    return name


def _could_be_tag(text: str) -> bool:
    """Whether ``text`` is made as a tag name is (``validate_tag_name``'s characters and start)."""
    return (
        text[0].isascii() and text[0].isalnum() and all(c.isascii() and (c.isalnum() or c in _TAG_CHARS) for c in text)
    )


def split_version_or_tag(value: Any) -> tuple[int | None, str | None]:
    """A version argument as users give it -> (version number, None) or (None, tag name).

    An int, or a string of ASCII digits (with an optional sign), is a version number; any
    other string is a tag name (tag names never look like numbers). A string that is made
    of digits and signs that is neither a number nor a tag name ('²', '++1') raises
    InvalidArgument; one that can be a tag name ('2026-11-03', as automatic tags are named)
    is a tag name.
    """
    if value is None:
        return None, None
    if isinstance(value, str):
        text = value.strip()
        if _VERSION_NUMBER.fullmatch(text):
            value = int(text)
        elif text and all(c in "+-" or c.isnumeric() for c in text) and not _could_be_tag(text):
            raise InvalidArgument(
                f"version {value!r} is not a version number: give ASCII digits (e.g. version=12 or '12'), "
                "or a tag name (letters, digits and _ . : + = @ -, starting with a letter or digit)"
            )
        else:
            return None, value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(f"version must be a version number (int) or a tag name (str), not {value!r}")
    number = int(value)
    if number > MAX_VERSION:
        raise InvalidArgument(f"version {value} is beyond the largest version number, {MAX_VERSION}")
    return number, None


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

    def __repr__(self) -> str:
        """One line: the name, the version, its commit time and the tag's expiry (not the copy of the version)."""
        expires = "" if self.expires_at_ms is None else f", expires={iso_ms(self.expires_at_ms)}"
        auto = ", automatic=True" if self.automatic else ""
        return f"Tag(name={self.name!r}, version={self.tagged_version}, committed={iso_ms(self.version.timestamp_ms)}{expires}{auto})"

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
    def from_json(cls, data: bytes, where: str) -> Tag:
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
