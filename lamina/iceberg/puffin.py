"""Deletion vectors as Iceberg v3 ``deletion-vector-v1`` blobs in Puffin files.

A Lamina deletion vector (``lamina.spec.dv``) is a blob ``u32 length | u32 crc32 | payload``
whose payload is a 32-bit roaring bitmap in the portable serialization. Iceberg's
``deletion-vector-v1`` blob is ``u32 length (big-endian) | magic D1 D3 39 64 | vector |
u32 crc32 (big-endian)`` where the vector is a 64-bit roaring bitmap in the portable
serialization: a little-endian u64 count of 32-bit bitmaps, then per bitmap a little-endian
u32 key (the positions' high 32 bits) and the 32-bit bitmap's portable bytes. Lamina's
positions are below 2^32, so the vector is ``count 1 | key 0 | Lamina's payload``: the payload's bytes are reused as they are, but the framing differs
(magic, checksum over the magic and vector, checksum after the vector), so the Iceberg view
writes its own Puffin file beside each Lamina DV file rather than pointing at its bytes.

A Puffin file is ``PFA1 | blob* | PFA1 | footer JSON | u32 footer length (LE) | u32 flags | PFA1``;
each blob's footer entry names its ``referenced-data-file`` and ``cardinality``, with
snapshot id and sequence number -1 (inherited from the manifest entry, as the spec says).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

from lamina.spec.dv import decode

MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
BLOB_TYPE = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2147483645  # Iceberg's _pos metadata column: what a DV's positions are


@dataclass(frozen=True)
class PuffinBlob:
    """Where one deletion vector lies in a Puffin file."""

    referenced_data_file: str
    offset: int
    length: int
    cardinality: int


def dv_blob(lamina_blob: bytes, where: str, offset: int) -> tuple[bytes, int]:
    """The ``deletion-vector-v1`` blob of a Lamina DV blob (checked as a reader checks it:
    CorruptMetadata if damaged), and its cardinality."""
    bitmap = decode(lamina_blob, where, offset)
    payload = lamina_blob[8 : 8 + struct.unpack_from(">I", lamina_blob)[0]]
    vector = struct.pack("<QI", 1, 0) + payload  # (Lamina writes no empty DV: a DV deletes a row)
    body = DV_MAGIC + vector
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body)), len(bitmap)


def puffin_file(
    vectors: list[tuple[str, bytes, int]], created_by: str, extra: list[dict[str, str]] | None = None
) -> tuple[bytes, list[PuffinBlob]]:
    """A Puffin file of ``vectors`` ((referenced data file, deletion-vector-v1 blob,
    cardinality) each) and where each blob lies in it; ``extra``: more properties of each
    blob (the view records which Lamina deletion vector a blob is)."""
    parts = [MAGIC]
    at = len(MAGIC)
    blobs = []
    meta = []
    for i, (ref, blob, cardinality) in enumerate(vectors):
        blobs.append(PuffinBlob(ref, at, len(blob), cardinality))
        meta.append(
            {
                "type": BLOB_TYPE,
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": at,
                "length": len(blob),
                "properties": {
                    "referenced-data-file": ref,
                    "cardinality": str(cardinality),
                    **(extra[i] if extra else {}),
                },
            }
        )
        parts.append(blob)
        at += len(blob)
    footer = json.dumps({"blobs": meta, "properties": {"created-by": created_by}}).encode()
    parts += [MAGIC, footer, struct.pack("<i", len(footer)), b"\x00\x00\x00\x00", MAGIC]
    return b"".join(parts), blobs
