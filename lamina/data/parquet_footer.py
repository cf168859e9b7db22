"""A Parquet file's footer as data, and data files joined from other files' column chunks.

A Parquet file is its column chunks (pages, page indexes, bloom filters) followed by a footer,
``FileMetaData`` in Thrift's compact protocol, which says where each chunk starts and how
long it is. A chunk's bytes mean the same wherever they sit, so a data file can be made of
another file's bytes as they are, with a footer of its own (``joined``): columns renamed and
given field ids, more columns appended from a second file, statistics dropped. This is how a
staged Parquet source becomes a table's data file without being decoded and encoded again
(``lamina.data.copy``); parquet-java's ``ParquetRewriter`` and Hudi's binary-copy clustering
work the same way.

The codec below keeps every Thrift field it reads, known or not, and writes it back
unchanged: a footer decoded and encoded again is the same bytes (tests/data/test_parquet_footer.py).
Only the fields named here are ever changed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from lamina.errors import FooterError

MAGIC = b"PAR1"

# Thrift compact protocol type codes.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
_INTS = (_I16, _I32, _I64)

# A struct: its fields as [field id, type, value] in the order they were read. A list or set
# value: (element type, [values]); a map: (key type, value type, [(key, value)]); a double:
# its 8 bytes as they were; booleans: True/False.
Fields = list[list[Any]]


# -- the codec ------------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7
        if shift > 63:
            raise FooterError("a varint longer than 64 bits")


def _unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _read_value(buf: bytes, pos: int, t: int) -> tuple[Any, int]:
    if t in _INTS:
        n, pos = _varint(buf, pos)
        return _unzigzag(n), pos
    if t == _BINARY:
        n, pos = _varint(buf, pos)
        if pos + n > len(buf):
            raise FooterError("a binary field runs past the footer")
        return bytes(buf[pos : pos + n]), pos + n
    if t == _STRUCT:
        return _read_struct(buf, pos)
    if t in (_LIST, _SET):
        head = buf[pos]
        pos += 1
        n, et = head >> 4, head & 0x0F
        if n == 15:
            n, pos = _varint(buf, pos)
        items = []
        for _ in range(n):
            v, pos = _read_element(buf, pos, et)
            items.append(v)
        return (et, items), pos
    if t == _MAP:
        n, pos = _varint(buf, pos)
        if not n:
            return (0, 0, []), pos
        kv = buf[pos]
        pos += 1
        kt, vt = kv >> 4, kv & 0x0F
        pairs = []
        for _ in range(n):
            k, pos = _read_element(buf, pos, kt)
            v, pos = _read_element(buf, pos, vt)
            pairs.append((k, v))
        return (kt, vt, pairs), pos
    if t == _BYTE:
        return buf[pos], pos + 1
    if t == _DOUBLE:
        if pos + 8 > len(buf):
            raise FooterError("a double runs past the footer")
        return bytes(buf[pos : pos + 8]), pos + 8
    raise FooterError(f"unknown Thrift type {t}")


def _read_element(buf: bytes, pos: int, t: int) -> tuple[Any, int]:
    if t in (_TRUE, _FALSE):  # a boolean in a container: one byte
        return buf[pos] == _TRUE, pos + 1
    return _read_value(buf, pos, t)


def _read_struct(buf: bytes, pos: int) -> tuple[Fields, int]:
    fields: Fields = []
    last = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == _STOP:
            return fields, pos
        t, delta = head & 0x0F, head >> 4
        if delta:
            fid = last + delta
        else:
            n, pos = _varint(buf, pos)
            fid = _unzigzag(n)
        last = fid
        if t in (_TRUE, _FALSE):
            fields.append([fid, _TRUE, t == _TRUE])
        else:
            v, pos = _read_value(buf, pos, t)
            fields.append([fid, t, v])


def decode(buf: bytes) -> Fields:
    """A Thrift compact struct (a whole footer) as fields."""
    try:
        fields, end = _read_struct(buf, 0)
    except IndexError:
        raise FooterError("the footer ends inside a field") from None
    if end != len(buf):
        raise FooterError(f"{len(buf) - end} bytes after the footer's struct")
    return fields


def _write_varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_int(out: bytearray, n: int) -> None:
    _write_varint(out, (n << 1) ^ (n >> 63))


def _write_value(out: bytearray, t: int, v: Any) -> None:
    if t in _INTS:
        _write_int(out, v)
    elif t == _BINARY:
        _write_varint(out, len(v))
        out += v
    elif t == _STRUCT:
        _write_struct(out, v)
    elif t in (_LIST, _SET):
        et, items = v
        if len(items) < 15:
            out.append((len(items) << 4) | et)
        else:
            out.append(0xF0 | et)
            _write_varint(out, len(items))
        for x in items:
            _write_element(out, et, x)
    elif t == _MAP:
        kt, vt, pairs = v
        _write_varint(out, len(pairs))
        if pairs:
            out.append((kt << 4) | vt)
            for k, x in pairs:
                _write_element(out, kt, k)
                _write_element(out, vt, x)
    elif t == _BYTE:
        out.append(v & 0xFF)
    elif t == _DOUBLE:
        out += v
    else:
        raise FooterError(f"unknown Thrift type {t}")


def _write_element(out: bytearray, t: int, v: Any) -> None:
    if t in (_TRUE, _FALSE):
        out.append(_TRUE if v else _FALSE)
    else:
        _write_value(out, t, v)


def _write_struct(out: bytearray, fields: Fields) -> None:
    last = 0
    for fid, t, v in fields:
        ct = (_TRUE if v else _FALSE) if t == _TRUE else t
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | ct)
        else:
            out.append(ct)
            _write_int(out, fid)
        last = fid
        if t != _TRUE:
            _write_value(out, t, v)
    out.append(_STOP)


def encode(fields: Fields) -> bytes:
    out = bytearray()
    _write_struct(out, fields)
    return bytes(out)


def get(fields: Fields, fid: int, default: Any = None) -> Any:
    for f in fields:
        if f[0] == fid:
            return f[2]
    return default


def put(fields: Fields, fid: int, t: int, v: Any) -> None:
    """Set field ``fid`` (in field-id order if new)."""
    for f in fields:
        if f[0] == fid:
            f[1], f[2] = t, v
            return
    at = next((i for i, f in enumerate(fields) if f[0] > fid), len(fields))
    fields.insert(at, [fid, t, v])


def drop(fields: Fields, *fids: int) -> None:
    fields[:] = [f for f in fields if f[0] not in fids]


# -- a file's footer ---------------------------------------------------------------------------------


def footer_of(data: bytes | memoryview) -> tuple[Fields, int]:
    """(the footer's fields, where the footer starts) of a whole Parquet file's bytes. A file
    whose footer is encrypted (magic ``PARE``) or that is not Parquet is a FooterError."""
    n = len(data)
    if n < 12 or bytes(data[:4]) != MAGIC or bytes(data[n - 4 :]) != MAGIC:
        raise FooterError("not a Parquet file with a plaintext footer")
    (length,) = struct.unpack("<I", bytes(data[n - 8 : n - 4]))
    start = n - 8 - length
    if start < 4:
        raise FooterError("the footer length points before the file's start")
    return decode(bytes(data[start : n - 8])), start


# FileMetaData
_FM_SCHEMA, _FM_ROW_GROUPS, _FM_KV, _FM_COLUMN_ORDERS, _FM_ENCRYPTION, _FM_SIGNING_KEY = 2, 4, 5, 7, 8, 9
# SchemaElement
_SE_NAME, _SE_CHILDREN, _SE_FIELD_ID = 4, 5, 9
# RowGroup
_RG_COLUMNS, _RG_BYTES, _RG_ROWS, _RG_COMPRESSED = 1, 2, 3, 6
# ColumnChunk: file_path, file_offset (deprecated), meta_data, offset index, column index, encryption
_CC_PATH, _CC_OFFSET, _CC_META, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX, _CC_COLUMN_INDEX_LEN = 1, 2, 3, 4, 6, 7
_CC_KNOWN = frozenset(range(1, 8))
# ColumnMetaData: path_in_schema, data/index/dictionary page offsets, statistics, bloom filter offset
_MD_PATH, _MD_DATA_PAGE, _MD_INDEX_PAGE, _MD_DICT_PAGE, _MD_STATS, _MD_BLOOM = 3, 9, 10, 11, 12, 14
_MD_KNOWN = frozenset(range(1, 18))


def _leaves(fm: Fields) -> tuple[Fields, list[Fields]]:
    """(root, leaves) of a flat schema; FooterError for a nested one."""
    _, schema = get(fm, _FM_SCHEMA) or (None, [])
    if not schema:
        raise FooterError("the footer has no schema")
    root: Fields = schema[0]
    leaves: list[Fields] = schema[1:]
    if get(root, _SE_CHILDREN) != len(leaves) or any(get(e, _SE_CHILDREN) is not None for e in leaves):
        raise FooterError("a nested schema")
    return root, leaves


def _chunks(fm: Fields, leaves: int) -> list[tuple[Fields, list[Fields]]]:
    """(row group, its column chunks) of every row group; each chunk in this file, plaintext."""
    out: list[tuple[Fields, list[Fields]]] = []
    for rg in (get(fm, _FM_ROW_GROUPS) or (None, []))[1]:
        _, cols = get(rg, _RG_COLUMNS) or (None, [])
        if len(cols) != leaves:
            raise FooterError("a row group whose columns are not the schema's")
        for cc in cols:
            if get(cc, _CC_PATH) is not None or get(cc, _CC_META) is None or any(f[0] not in _CC_KNOWN for f in cc):
                raise FooterError("a column chunk in another file, encrypted, or of an unknown kind")
        out.append((rg, cols))
    return out


def _shifted(cc: Fields, by: int) -> Fields:
    """Column chunk ``cc`` with every offset it records moved ``by`` bytes (its bytes moved there)."""
    md = get(cc, _CC_META)
    if any(f[0] not in _MD_KNOWN for f in md):
        raise FooterError("column metadata with fields this reader does not know (offsets it cannot move)")
    for fields, fid in (
        (cc, _CC_OFFSET_INDEX),
        (cc, _CC_COLUMN_INDEX),
        (md, _MD_DATA_PAGE),
        (md, _MD_INDEX_PAGE),
        (md, _MD_DICT_PAGE),
        (md, _MD_BLOOM),
    ):
        v = get(fields, fid)
        if v is not None:
            put(fields, fid, _I64, v + by)
    v = get(cc, _CC_OFFSET)
    if v:  # deprecated; 0 where a writer leaves it unset
        put(cc, _CC_OFFSET, _I64, v + by)
    return cc


def joined(
    data: pa.Buffer,
    extra: pa.Buffer | None,
    *,
    names: Sequence[str],
    field_ids: Sequence[int | None],
    without_stats: Sequence[int],
    key_value: Sequence[tuple[bytes, bytes]],
) -> bytes:
    """A Parquet file of ``data``'s column chunks as they are (a flat file), then ``extra``'s
    (a flat file of as many rows in row groups of the same sizes), with a new footer: the
    leaves of ``data`` named ``names`` with field ids ``field_ids`` (None: none), no column
    statistics or column index for the leaves ``without_stats`` (their positions), the
    key-value metadata ``key_value`` (replacing ``data``'s), and every other field as ``data``'s
    footer has it (its writer's name, which tells readers how far to trust its statistics).
    FooterError for a file it cannot join (encrypted, nested, a column chunk stored elsewhere,
    row groups that do not line up)."""
    fm, start = footer_of(data)
    if get(fm, _FM_ENCRYPTION) is not None or get(fm, _FM_SIGNING_KEY) is not None:
        raise FooterError("an encrypted file")
    root, leaves = _leaves(fm)
    if len(leaves) != len(names) or len(field_ids) != len(names):
        raise FooterError(f"{len(leaves)} columns in the file, {len(names)} expected")
    groups = _chunks(fm, len(leaves))
    for leaf, name, fid in zip(leaves, names, field_ids):
        put(leaf, _SE_NAME, _BINARY, name.encode())
        if fid is None:
            drop(leaf, _SE_FIELD_ID)
        else:
            put(leaf, _SE_FIELD_ID, _I32, fid)
    for _, cols in groups:
        for i, (cc, name) in enumerate(zip(cols, names)):
            md = get(cc, _CC_META)
            put(md, _MD_PATH, _LIST, (_BINARY, [name.encode()]))
            if i in without_stats:
                drop(md, _MD_STATS)
                drop(cc, _CC_COLUMN_INDEX, _CC_COLUMN_INDEX_LEN)
    body = [memoryview(data)[:start]]
    if extra is not None:
        xm, xstart = footer_of(extra)
        _, xleaves = _leaves(xm)
        xgroups = _chunks(xm, len(xleaves))
        if len(xgroups) != len(groups) or any(
            get(a, _RG_ROWS) != get(b, _RG_ROWS) for (a, _), (b, _) in zip(groups, xgroups)
        ):
            raise FooterError("the appended columns' row groups do not line up with the file's")
        by = start - len(MAGIC)  # extra's chunks (after its magic) are placed where data's footer was
        for (rg, cols), (xrg, xcols) in zip(groups, xgroups):
            cols.extend(_shifted(cc, by) for cc in xcols)
            put(rg, _RG_BYTES, _I64, get(rg, _RG_BYTES) + get(xrg, _RG_BYTES))
            a, b = get(rg, _RG_COMPRESSED), get(xrg, _RG_COMPRESSED)
            if a is not None and b is not None:
                put(rg, _RG_COMPRESSED, _I64, a + b)
            else:
                drop(rg, _RG_COMPRESSED)
        put(root, _SE_CHILDREN, _I32, len(leaves) + len(xleaves))
        get(fm, _FM_SCHEMA)[1].extend(xleaves)
        orders, xorders = get(fm, _FM_COLUMN_ORDERS), get(xm, _FM_COLUMN_ORDERS)
        if orders is not None and xorders is not None:
            orders[1].extend(xorders[1])
        else:
            drop(fm, _FM_COLUMN_ORDERS)
        body.append(memoryview(extra)[len(MAGIC) : xstart])
    drop(fm, _FM_KV)
    if key_value:
        put(fm, _FM_KV, _LIST, (_STRUCT, [[[1, _BINARY, k], [2, _BINARY, v]] for k, v in key_value]))
    footer = encode(fm)
    return b"".join([*body, footer, struct.pack("<I", len(footer)), MAGIC])
