"""The view's metadata files: their names (``metadata/v<k>.metadata.json``), the version
hint that names the newest, finding the newest (``read_head``, remembered per process), and
the locations Iceberg readers see of the files the view writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lamina.errors import CorruptMetadata
from lamina.iceberg.manifests import METADATA_DIR
from lamina.iceberg.writer import flush
from lamina.io import FileIO

__all__ = [
    "HINT_PATH",
    "Head",
    "forget_head",
    "hint_number",
    "metadata_path",
    "parse_metadata_name",
    "read_head",
    "relative_path",
    "remember_head",
    "table_location",
    "write_hint",
]

HINT_PATH = f"{METADATA_DIR}/version-hint.text"


def metadata_path(number: int) -> str:
    return f"{METADATA_DIR}/v{number}.metadata.json"


def parse_metadata_name(name: str) -> int | None:
    """k of ``v<k>.metadata.json`` (None for another name)."""
    if name.startswith("v") and name.endswith(".metadata.json"):
        digits = name[1 : -len(".metadata.json")]
        if digits.isdigit():
            return int(digits)
    return None


@dataclass
class Head:
    """The view's newest metadata file."""

    number: int
    metadata: dict[str, Any]

    @property
    def path(self) -> str:
        return metadata_path(self.number)


# The newest metadata file this process read or wrote, per table: the next sync starts from it
# after one existence check of the file after it (metadata files never change once written).
_known_heads: dict[str, Head] = {}


def read_head(io: FileIO) -> Head | None:
    """The newest metadata file: the hint's, or a newer one found by probing forward (the
    hint is rewritten after each file, so it may lag); by listing if there is no hint.
    Updates this process queued for the table run first (``lamina.iceberg.writer``)."""
    flush(io.uri)
    known = _known_heads.get(io.uri)
    if known is not None and not io.exists(metadata_path(known.number + 1)):
        if io.exists(known.path):  # (not a view deleted meanwhile)
            return known
    number = hint_number(io)
    if number is None or not io.exists(metadata_path(number)):
        found = [k for k in (parse_metadata_name(n) for n in io.list_names(METADATA_DIR)) if k is not None]
        if not found:
            _known_heads.pop(io.uri, None)
            return None
        number = max(found)
    while io.exists(metadata_path(number + 1)):
        number += 1
    data = io.get(metadata_path(number))
    try:
        head = Head(number, json.loads(data))
    except ValueError as e:
        raise CorruptMetadata(
            f"Iceberg metadata {metadata_path(number)} does not parse ({e}); run `lamina iceberg sync`"
        ) from None
    _known_heads[io.uri] = head
    return head


def hint_number(io: FileIO) -> int | None:
    """The number ``version-hint.text`` names (None: no usable hint)."""
    raw = io.get_optional(HINT_PATH)
    try:
        return None if raw is None else int(raw.decode().strip())
    except ValueError:
        return None


def write_hint(io: FileIO, number: int, previous: int | None) -> None:
    """Point the hint at metadata file ``number``. Rewritten in place (no new file: what a
    busy disk makes costly) when the text is no shorter than the number it held, so it is
    never padded; replaced otherwise."""
    text = str(number).encode()
    if previous is not None and len(text) >= len(str(previous)) and number > previous:
        io.put_in_place(HINT_PATH, text)
    else:
        io.put(HINT_PATH, text)


def relative_path(metadata_uri: str, io: FileIO) -> str:
    """A path the view wrote, relative to the table root, from its URI."""
    root = table_location(io)
    return metadata_uri[len(root) + 1 :] if metadata_uri.startswith(root + "/") else metadata_uri


def table_location(io: FileIO) -> str:
    """The table's location as Iceberg readers open it."""
    return io.full_uri(METADATA_DIR)[: -len(METADATA_DIR) - 1]


def remember_head(io: FileIO, head: Head) -> None:
    """``head`` is the newest metadata file of ``io``'s view (this process wrote it)."""
    _known_heads[io.uri] = head


def forget_head(io: FileIO) -> None:
    """Another writer took the next metadata file: the head this process knew is stale."""
    _known_heads.pop(io.uri, None)
