"""Where things live under a table root, and how version numbers map to names."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from lamina.errors import CorruptMetadata

FORMAT_VERSION = 1
META_DIR = "_lamina"
VERSIONS_DIR = f"{META_DIR}/versions"
MANIFESTS_DIR = f"{META_DIR}/manifests"
HINT_PATH = f"{META_DIR}/_latest_version.json"
WRITES_DIR = f"{META_DIR}/writes"
TAGS_DIR = f"{META_DIR}/tags"
DATA_DIR = "data"

MAX_VERSION = 2**64 - 1
VERSION_NAME_LEN = 20  # len(str(2**64 - 1))


def random_hex(nbytes: int) -> str:
    """``2 * nbytes`` random hex digits, the unique part of a name (a uuid4's hex, without
    building a UUID object: names are made several times per commit)."""
    return os.urandom(nbytes).hex()


def version_file_name(version: int) -> str:
    """Slot names count down from 2^64 - 1: newest sorts first, so one ordered LIST page finds the latest."""
    return f"{MAX_VERSION - version:0{VERSION_NAME_LEN}d}.json"


def version_path(version: int) -> str:
    return f"{VERSIONS_DIR}/{version_file_name(version)}"


def parse_version_file_name(name: str) -> int | None:
    """The version a file name under versions/ stands for, or None for anything else."""
    stem, dot, ext = name.partition(".")
    if ext != "json" or len(stem) != VERSION_NAME_LEN or not stem.isdigit():
        return None
    v = MAX_VERSION - int(stem)
    if v < 0:
        raise CorruptMetadata(f"version file name {name!r} is out of range")
    return v


# Version manifests staged by the SQL catalog's coordinator before its row swap (the
# commit point of catalog tables), published under their final names after it. Under
# versions/ so orphan cleanup never deletes one; readers ignore them (not a 20-digit name).
PENDING_DIR = f"{VERSIONS_DIR}/pending"


def pending_path(version: int, commit_id: str) -> str:
    return f"{PENDING_DIR}/{version:020d}-{commit_id}.json"


def parse_pending_name(name: str) -> int | None:
    """The version a staged manifest's file name stands for, or None."""
    stem, dot, ext = name.partition(".")
    v, dash, commit_id = stem.partition("-")
    if ext != "json" or not dash or len(v) != VERSION_NAME_LEN or not v.isdigit() or not commit_id.isalnum():
        return None
    return int(v)


# Manifests are Parquet (``.parquet``), but for root manifests of tables with the feature
# ``arrow-root-manifests``, which are Arrow IPC files (``.arrow``): readers tell them apart by name.
ARROW_MANIFEST_SUFFIX = ".arrow"


def new_manifest_path(kind: str, arrow: bool = False) -> str:
    return f"{MANIFESTS_DIR}/{random_hex(16)}.{kind}{ARROW_MANIFEST_SUFFIX if arrow else '.parquet'}"


# A root manifest carried inside its version manifest (feature ``inline-root-manifests``) is named
# like a root file, with this suffix, though no file has the name: the name identifies the root
# (equal names, same root) and, being non-null, says the version has files.
INLINE_ROOT_SUFFIX = ".root.inline"


def new_inline_root_name() -> str:
    return f"{MANIFESTS_DIR}/{random_hex(16)}{INLINE_ROOT_SUFFIX}"


def inline_root_name_of(path: str) -> str:
    """The name a root named ``path`` as a file takes when its version manifest carries it."""
    return path.rsplit(".root", 1)[0] + INLINE_ROOT_SUFFIX


def is_inline_root(path: str | None) -> bool:
    """Whether ``path`` names a root carried by its version manifest (not a file)."""
    return path is not None and path.endswith(INLINE_ROOT_SUFFIX)


def new_data_path(partition_dir: str | None, write_id: str) -> str:
    base = f"{DATA_DIR}/{partition_dir}" if partition_dir else DATA_DIR
    return f"{base}/{write_id}-{random_hex(6)}.parquet"


# An engine that writes data files with its own writer puts a write's files under one
# directory of their own (Spark's native writer: data/spark-<write id>/<partition dirs>/...),
# which names the write id, so orphan cleanup and an abort recognise them.
ENGINE_DIR_PREFIX = "spark-"


def engine_data_dir(write_id: str) -> str:
    return f"{DATA_DIR}/{ENGINE_DIR_PREFIX}{write_id}"


DV_DIR = f"{DATA_DIR}/_dv"


def owned(path: str) -> bool:
    """Whether the table owns the file at ``path`` (an entry's path, or one listed under the
    root): what its writers put under ``data/`` and ``_lamina/``. Only owned files are ever
    deleted (expiry, orphan cleanup, purge); any other file an entry references is external
    (format.md, "External files"): adopted in place, never written or deleted."""
    return path.startswith((f"{DATA_DIR}/", f"{META_DIR}/"))


def has_external(paths: Any) -> bool:
    """Whether any of ``paths`` (an Arrow string array of entries' paths) is an external file."""
    return not pc.all(pc.starts_with(paths, f"{DATA_DIR}/")).as_py()


def new_dv_path(write_id: str) -> str:
    """Deletion-vector files carry the write id too, so orphan cleanup can spare running writes."""
    return f"{DV_DIR}/{write_id}-{random_hex(6)}.dv"


# -- version logs -----------------------------------------------------------------------
#
# A table has one version log per branch. ``main``'s is the table's root log above
# (versions/, the hint, freed/); every other branch has a log of the same shape under a
# directory named by the branch's id (never its name: a branch renamed keeps its log, a
# branch deleted and made again under its name gets a fresh one, so a put delayed past the
# deletion can never land in the new branch). The branch's record, by name, says which.

BRANCHES_DIR = f"{META_DIR}/branches"  # <name>.json: a branch's record (lamina.spec.branch)
BRANCH_LOGS_DIR = f"{META_DIR}/branch_logs"  # <branch id>/...: each branch's version log
MAIN_BRANCH = "main"


@dataclass(frozen=True)
class LogLayout:
    """Where one version log keeps its slots, hint, freed-slot records and staged manifests."""

    root: str  # "_lamina" for main, "_lamina/branch_logs/<id>" for a branch

    @property
    def versions_dir(self) -> str:
        return f"{self.root}/versions"

    @property
    def hint_path(self) -> str:
        return f"{self.root}/_latest_version.json"

    @property
    def freed_dir(self) -> str:
        return f"{self.root}/freed"

    @property
    def pending_dir(self) -> str:
        return f"{self.versions_dir}/pending"

    def version_path(self, version: int) -> str:
        return f"{self.versions_dir}/{version_file_name(version)}"

    def freed_path(self, first: int, last: int) -> str:
        return f"{self.freed_dir}/{first:020d}-{last:020d}.json"

    def pending_path(self, version: int, commit_id: str) -> str:
        return f"{self.pending_dir}/{version:020d}-{commit_id}.json"


MAIN_LOG = LogLayout(META_DIR)


def branch_log(branch_id: str) -> LogLayout:
    return LogLayout(f"{BRANCH_LOGS_DIR}/{branch_id}")
