"""Table properties that hold numbers or one of a few words: checked when a table is
created, so a typo is refused up front instead of failing (or being ignored with a
warning) in every later write or maintenance call."""

from __future__ import annotations

import math
from typing import Mapping

from lamina.errors import InvalidArgument
from lamina.spec.slot import SLOT_CHUNK_PROP, SLOT_RETENTION_PROP

# name -> (integer only, smallest allowed value)
NUMERIC_PROPERTIES: dict[str, tuple[bool, float]] = {
    "write.max-rows-per-file": (True, 1),
    "manifest.inline-max-files": (True, 0),
    "manifest.leaf-target-files": (True, 1),
    "manifest.merge-min-leaves": (True, 2),
    "commit.retry.max-attempts": (True, 1),
    "commit.retry.max-seconds": (False, 0),
    "commit.retry.backoff-min-ms": (False, 0),
    "commit.retry.backoff-max-ms": (False, 0),
    "expire.reader-grace-ms": (True, 0),
    SLOT_CHUNK_PROP: (True, 1),
    SLOT_RETENTION_PROP: (True, 0),
    "tag.auto-retain-max": (True, 0),
}


DELETE_MODES = ("merge-on-read", "copy-on-write")
AUTO_TAG_PERIODS = ("daily", "hourly")


def _choices() -> dict[str, tuple[str, ...]]:
    return {"write.delete.mode": DELETE_MODES, "tag.auto-create": AUTO_TAG_PERIODS}


def check_properties(properties: Mapping[str, str]) -> None:
    """InvalidArgument naming every numeric property whose value is not a number in range,
    and every property of a few words whose value is none of them."""
    bad = []
    for name, words in _choices().items():
        if name in properties and properties[name] not in words:
            bad.append(f"{name}={properties[name]!r} (give one of {', '.join(words)})")
    for name, value in properties.items():
        rule = NUMERIC_PROPERTIES.get(name)
        if rule is None:
            continue
        integer, minimum = rule
        try:  # parsed as the readers of the property parse it: int() or float()
            number = int(str(value).strip()) if integer else float(value)
            ok = math.isfinite(number) and number >= minimum
        except (TypeError, ValueError):
            ok = False
        if not ok:
            bad.append(f"{name}={value!r} (give {'an integer' if integer else 'a number'} >= {minimum:g})")
    if bad:
        raise InvalidArgument(f"table properties with values that cannot be used: {'; '.join(bad)}. Nothing was created.")
