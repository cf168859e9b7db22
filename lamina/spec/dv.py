"""Deletion vectors: deleted row positions of one data file, as a roaring bitmap.

A DV file holds the vectors one commit wrote, one blob per data file::

    b"LDV1"                                   magic, at offset 0
    blob*: u32 length | u32 crc32 | payload   big-endian; payload = portable roaring bitmap

A content entry points at its blob with ``dv_path`` (relative to the table
root), ``dv_offset`` (where the blob's length field starts), ``dv_length``
(8 + payload bytes) and ``dv_cardinality`` (deleted rows). A data file has at
most one DV per version: deleting more rows merges the old vector into a new
blob in the new commit's DV file. Positions are 0-based row numbers in the file.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
from pyroaring import BitMap

from lamina.errors import CorruptMetadata

MAGIC = b"LDV1"
_HEAD = struct.Struct(">II")


def encode(vectors: list[BitMap]) -> tuple[bytes, list[tuple[int, int]]]:
    """The DV file's bytes and each vector's (offset, length)."""
    out = [MAGIC]
    where = []
    pos = len(MAGIC)
    for bm in vectors:
        bm.run_optimize()
        payload = bm.serialize()
        blob = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        where.append((pos, len(blob)))
        out.append(blob)
        pos += len(blob)
    return b"".join(out), where


def decode(blob: bytes, path: str, offset: int) -> BitMap:
    """One vector from its blob (the ``dv_length`` bytes at ``dv_offset``), checksum verified."""
    what = f"deletion vector {path} at offset {offset}"
    if len(blob) < _HEAD.size:
        raise CorruptMetadata(f"{what} is truncated ({len(blob)} bytes); run `lamina fsck`")
    n, crc = _HEAD.unpack_from(blob)
    payload = blob[_HEAD.size : _HEAD.size + n]
    if len(payload) != n or zlib.crc32(payload) != crc:
        raise CorruptMetadata(f"{what} is corrupt (length or checksum mismatch); run `lamina fsck`")
    try:
        return BitMap.deserialize(payload)
    except Exception as e:  # pyroaring raises ValueError/OverflowError on garbage
        raise CorruptMetadata(f"{what} is not a roaring bitmap ({e})") from None


def positions(bm: BitMap) -> np.ndarray:
    return np.frombuffer(bm.to_array(), dtype=np.uint32)


def positions_within(bm: BitMap, num_rows: int) -> np.ndarray:
    """The DV's positions, checked to be rows of a file of ``num_rows`` rows."""
    pos = positions(bm)
    if len(pos) and int(pos[-1]) >= num_rows:
        raise CorruptMetadata(f"deletion vector deletes row {int(pos[-1])} of a file with {num_rows} rows")
    return pos


def keep_mask(bm: BitMap, num_rows: int) -> np.ndarray:
    """Boolean mask of the rows a DV leaves live."""
    mask = np.ones(num_rows, dtype=bool)
    mask[positions_within(bm, num_rows)] = False
    return mask
