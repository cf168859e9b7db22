"""Paths inside a table: the one rule a relative path keeps (no escaping the table's root),
and absolute locations (URIs) of files outside it."""

from __future__ import annotations

import functools
import re

from lamina.errors import InvalidUri

__all__ = ["PATH_RULES", "URI_PATTERN", "VALID_PATH_EXAMPLE", "check_relative", "is_uri", "path_problem"]

# The one rule for a path inside a table (relative to its root), as (what is wrong, pattern).
# The patterns are in the syntax both Python's re and Arrow's RE2 take, so add_files checks
# a whole column with them (``pc.match_substring_regex``) and every FileIO call one path.
PATH_RULES: tuple[tuple[str, str], ...] = (
    ("is absolute (starts with '/')", r"^/"),
    ("contains '\\' (the separator is '/')", r"\\"),
    ("has a '.' or '..' segment", r"(^|/)\.\.?(/|$)"),
    ("has an empty segment ('//' or a trailing '/')", r"//|/$"),
    ("contains a control character (NUL, newline, ...)", r"[\x00-\x1f\x7f]"),
)
VALID_PATH_EXAMPLE = "'data/part-0001.parquet'"
# An absolute location (``file:///abs/path``, ``s3://bucket/key``, ``memory://name/key``):
# what a manifest entry holds for a file that lies outside its table's root (format.md,
# "External files"). Relative paths never start with a scheme.
URI_PATTERN = r"^[A-Za-z][A-Za-z0-9+.-]*://"
_URI = re.compile(URI_PATTERN)


def is_uri(path: str) -> bool:
    """Whether ``path`` is an absolute location rather than a path relative to a table root."""
    return bool(_URI.match(path))


_INVALID_PATH = re.compile("|".join(f"(?:{pattern})" for _, pattern in PATH_RULES))


def path_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a path inside a table, or None if nothing is."""
    if not _INVALID_PATH.search(path):
        return None
    return next(why for why, pattern in PATH_RULES if re.search(pattern, path))


@functools.lru_cache(maxsize=8192)
def check_relative(path: str) -> str:
    """``path``, if it is a valid path inside a table; else InvalidUri saying what is wrong."""
    # cached: the same metadata paths are checked on every open and commit
    if _INVALID_PATH.search(path):
        raise InvalidUri(
            f"path {path!r} {path_problem(path)}: a path inside a table is relative to its root, "
            f"'/'-separated, without '.', '..' or empty segments, e.g. {VALID_PATH_EXAMPLE}"
        )
    return path
