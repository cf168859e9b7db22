"""Which column statistics a table's manifest entries keep: the ``write.metadata.metrics.*``
table properties, parsed into a per-column mode (Iceberg's metrics modes).

- ``none``: nothing; pruning never uses the column.
- ``counts``: the null count only (``IS NULL`` / ``IS NOT NULL`` prune).
- ``truncate(N)``: null count and bounds; a string or binary bound is cut to N characters
  (bytes): the lower bound to its prefix, the upper bound to its prefix with the last
  character that can be incremented incremented (no upper bound when none can). Both stay
  bounds of the file's values, so pruning stays exact. Other types keep full bounds.
- ``full``: null count and exact bounds.

By default the first ``max-inferred-column-defaults`` (32, Delta's
``dataSkippingNumIndexedCols``) top-level columns get ``truncate(16)`` and the rest
``none``; a table that sets ``write.metadata.metrics.default`` gives that mode to every
column; ``write.metadata.metrics.column.<col>`` sets one column's mode (docs/format.md,
"Column statistics"; docs/configuration.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidArgument
from lamina.spec.schema import Schema, field_id_of

METRICS_PREFIX = "write.metadata.metrics."
COLUMN_PREFIX = METRICS_PREFIX + "column."
"""``write.metadata.metrics.column.<col>``: the statistics mode of top-level column ``<col>``,
over the default (renaming the column renames the key)."""
_MODE = re.compile(r"\s*(none|counts|full|truncate\(\s*(\d+)\s*\))\s*\Z", re.IGNORECASE)
MODE_WORDS = "none, counts, truncate(N) with N >= 1, full"


@dataclass(frozen=True)
class StatsMode:
    """One column's statistics: ``kind`` is none, counts, truncate or full; ``length`` the
    characters (bytes) a truncate mode keeps of a string (binary) bound."""

    kind: str
    length: int = 0

    @property
    def counts(self) -> bool:
        return self.kind != "none"

    @property
    def bounds(self) -> bool:
        return self.kind in ("truncate", "full")

    def __str__(self) -> str:
        return f"truncate({self.length})" if self.kind == "truncate" else self.kind


NONE = StatsMode("none")
DEFAULT_MODE = StatsMode("truncate", 16)


def parse_mode(text: str) -> StatsMode:
    """A mode from its text (``none``, ``counts``, ``truncate(16)``, ``full``; any case); ValueError if it is none."""
    m = _MODE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is no statistics mode")
    if m.group(2) is not None:
        length = int(m.group(2))
        if length < 1:
            raise ValueError("truncate(N) needs N >= 1")
        return StatsMode("truncate", length)
    return StatsMode(m.group(1).lower())


def column_mode_keys(properties: Mapping[str, Any]) -> dict[str, str]:
    """The per-column keys of ``properties``: column name -> the mode's text."""
    return {k[len(COLUMN_PREFIX) :]: str(v) for k, v in properties.items() if str(k).startswith(COLUMN_PREFIX)}


def check_column_modes(properties: Mapping[str, Any], schema: Schema, outcome: str = "Nothing was created.") -> None:
    """InvalidArgument naming every ``write.metadata.metrics.column.<col>`` whose column is not
    a top-level column of ``schema`` or whose mode is not one (a typo would otherwise keep
    statistics silently). ``outcome`` ends the message."""
    bad = []
    for name, text in column_mode_keys(properties).items():
        if name not in schema.names:
            bad.append(f"{COLUMN_PREFIX}{name} names no top-level column (columns: {', '.join(schema.names)})")
            continue
        try:
            parse_mode(text)
        except ValueError:
            bad.append(f"{COLUMN_PREFIX}{name}={text!r} (give one of {MODE_WORDS})")
    if bad:
        raise InvalidArgument(f"table properties that cannot be used: {'; '.join(bad)}. {outcome}")


@dataclass(frozen=True)
class StatsPolicy:
    """The statistics mode of each top-level column, by field id (hashable: memo keys)."""

    modes: tuple[tuple[int, StatsMode], ...]
    _by_id: dict[int, StatsMode] = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", dict(self.modes))

    def __hash__(self) -> int:
        # memoized (the policy is immutable): it keys caches asked on every write, and hashing
        # a wide table's modes (one per column) each time was a cost on every commit
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(self.modes)
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, Any]:
        # string hashes differ between processes: the memoized hash is not pickled
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def mode(self, fid: int) -> StatsMode:
        return self._by_id.get(fid, NONE)

    def kept(self, schema: Schema) -> tuple[tuple[pa.Field, int, StatsMode], ...]:
        """(field, field id, mode) of the top-level columns of ``schema`` it keeps anything of,
        in schema order (memoized: writers ask on every file of a wide table)."""
        return _kept(schema, self)


@lru_cache(maxsize=256)
def _kept(schema: Schema, policy: StatsPolicy) -> tuple[tuple[pa.Field, int, StatsMode], ...]:
    fields = ((f, field_id_of(f)) for f in schema.arrow)
    return tuple((f, fid, policy.mode(fid)) for f, fid in fields if policy.mode(fid).counts)


@lru_cache(maxsize=256)
def _policy(
    schema: Schema, default: StatsMode | None, max_columns: int, columns: tuple[tuple[str, str], ...]
) -> StatsPolicy:
    by_name = dict(columns)
    modes = []
    for i, f in enumerate(schema.arrow):
        if f.name in by_name:
            mode = parse_mode(by_name[f.name])
        elif default is not None:
            mode = default
        else:
            mode = DEFAULT_MODE if i < max_columns else NONE
        modes.append((field_id_of(f), mode))
    return StatsPolicy(tuple(modes))


def stats_policy(schema: Schema, properties: Mapping[str, Any]) -> StatsPolicy:
    """The statistics policy a table with ``schema`` and ``properties`` writes entries by."""
    from lamina.spec.properties import TableProperties as P

    return _policy(
        schema,
        P.WRITE_METADATA_METRICS_DEFAULT.get(properties),
        P.WRITE_METADATA_METRICS_MAX_INFERRED_COLUMN_DEFAULTS.get(properties),
        tuple(sorted(column_mode_keys(properties).items())),
    )


def full_policy(schema: Schema) -> StatsPolicy:
    """Exact statistics for every column (what a table without the properties would keep if
    every mode were ``full``); for callers without a table's properties."""
    return _policy(schema, StatsMode("full"), 0, ())


# -- truncating bounds -------------------------------------------------------------------

_MAX_CODE_POINT = 0x10FFFF


def _incremented_text(prefix: str) -> str | None:
    """The shortest string above every string starting with ``prefix``: its last code point
    that can grow, grown (skipping the surrogates, which UTF-8 cannot hold), the rest dropped."""
    for i in range(len(prefix) - 1, -1, -1):
        c = ord(prefix[i])
        if c == _MAX_CODE_POINT:
            continue
        nxt = 0xE000 if 0xD800 <= c + 1 <= 0xDFFF else c + 1
        return prefix[:i] + chr(nxt)
    return None


def _incremented_bytes(prefix: bytes) -> bytes | None:
    for i in range(len(prefix) - 1, -1, -1):
        if prefix[i] != 0xFF:
            return prefix[:i] + bytes([prefix[i] + 1])
    return None


def truncate_values(lower: str | bytes | None, upper: str | bytes | None, n: int) -> tuple[Any, Any]:
    """One file's string (binary) bounds cut to ``n`` characters (bytes), as ``truncate_bounds``."""
    if lower is not None and len(lower) > n:
        lower = lower[:n]
    if upper is not None and len(upper) > n:
        upper = (_incremented_text if isinstance(upper, str) else _incremented_bytes)(upper[:n])  # type: ignore[arg-type]
    return lower, upper


def truncate_bounds(lower: Any, upper: Any, mode: StatsMode) -> tuple[Any, Any]:
    """Lower and upper bound arrays (one entry per file) cut to ``mode``: unchanged unless it
    is truncate(N) of a string or binary column. A lower bound becomes its prefix (still
    <= every value); an upper bound longer than N becomes its incremented prefix (still >
    every value), or null (unknown) if no character of the prefix can be incremented."""
    if mode.kind != "truncate":
        return lower, upper
    t = lower.type
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    if not (text or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return lower, upper
    n = mode.length
    cut = pc.utf8_slice_codeunits if text else pc.binary_slice
    length = pc.utf8_length if text else pc.binary_length
    lower = cut(lower, 0, n)
    too_long = pc.fill_null(pc.greater(length(upper), n), False)
    if not pc.any(too_long).as_py():
        return lower, upper
    # Only the few long maxima need the increment: one Python step per truncated value.
    grow = _incremented_text if text else _incremented_bytes
    cut_upper = cut(upper, 0, n).to_pylist()
    flags = too_long.to_pylist()
    values = upper.to_pylist()
    upper = pa.array([grow(p) if f else v for p, f, v in zip(cut_upper, flags, values)], t)
    return lower, upper
