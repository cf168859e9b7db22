"""The explorer's health advice: small files and deleted rows (from a version's live files)
and what expiry would free (its own dry run), each with the ``lamina`` command that acts on it."""

from __future__ import annotations

import shlex
import urllib.parse
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit.slots import SlotListing
from lamina.errors import LaminaError
from lamina.maintenance import expire
from lamina.operations import compaction
from lamina.spec.version import VersionManifest
from lamina.table.table import Table

__all__ = ["CommandRef", "compaction_advice", "deletes_advice", "expiry_advice"]

# Health thresholds: what a data engineer would act on.
SMALL_FILE_MIN_FILES = 8  # fewer small files than this in a table: not worth a compaction
DELETED_SHARE_ADVICE = 0.10  # a partition with this share of its rows deleted by DVs
VERSIONS_ADVICE = 100  # retained versions above which expiry is worth a look
CommandRef = tuple[str | None, str]  # how the CLI names a table: (catalog URI, ns.name), or (None, its location)


def _cli(ref: CommandRef, command: str, *args: str) -> str:
    """``lamina [--catalog URI] COMMAND TABLE ARGS``, quoted for a POSIX shell."""
    catalog, table = ref
    return " ".join(_quote(a) for a in ["lamina", *(["--catalog", catalog] if catalog else []), command, table, *args])


def _quote(arg: str) -> str:
    """``arg`` for a POSIX shell, readably: a predicate with 'literals' in double quotes."""
    if "'" in arg and not any(c in arg for c in '"$`\\!'):
        return f'"{arg}"'
    return shlex.quote(arg)


def _mib(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{int(n)} B"


def compaction_advice(e: pa.Table, vm: VersionManifest, ref: CommandRef) -> list[dict[str, Any]]:
    """Small files, by the compaction planner itself (default target, files under 3/4 of it),
    with the files it would write (bytes / target, per group)."""
    target = compaction.DEFAULT_TARGET
    groups = compaction.plan_groups(e, target, target * 3 // 4, vm.partition_spec, vm.all_partition_specs)
    if not groups:
        return []
    idx = np.concatenate(groups)
    size = e.column("size").to_numpy()
    inputs = len(idx)
    if inputs < SMALL_FILE_MIN_FILES:
        return []
    group_bytes = np.add.reduceat(size[idx], np.cumsum([0] + [len(g) for g in groups[:-1]]))
    outputs = int(np.maximum(1, -(-group_bytes // target)).sum())  # ceil(bytes / target), at least 1 a group
    parts = len(pc.unique(pc.fill_null(e.column("partition_path").take(pa.array(idx)), "")))
    return [
        {
            "kind": "small-files",
            "severity": "warn" if inputs >= 4 * outputs else "info",
            "message": (
                f"{inputs:,} files under {_mib(target * 3 // 4)} (or carrying deletes) in {parts:,} partition(s), "
                f"{_mib(int(size[idx].sum()))} in all: compaction would write ~{outputs:,} file(s)"
            ),
            "command": _cli(ref, "compact"),
            "facts": {"input_files": inputs, "output_files": outputs, "partitions": parts, "target_bytes": target},
        }
    ]


def deletes_advice(partitions: list[dict[str, Any]], ref: CommandRef) -> list[dict[str, Any]]:
    """Partitions where deletion vectors hide a large share of the rows: every read skips them."""
    out = []
    for p in partitions:
        if p["deleted_share"] >= DELETED_SHARE_ADVICE:
            where = ["--where", _where_of(p["partition"])] if p["partition"] else []
            out.append(
                {
                    "kind": "deleted-rows",
                    "severity": "warn" if p["deleted_share"] >= 0.2 else "info",
                    "message": (
                        f"{p['deleted_share']:.0%} of rows in partition {p['partition'] or '(unpartitioned)'} are "
                        f"deleted ({p['deleted_rows']:,} of {p['rows'] + p['deleted_rows']:,}): "
                        f"compacting it drops them from its files"
                    ),
                    "command": _cli(ref, "compact", *where),
                    "facts": {
                        "partition": p["partition"],
                        "deleted_rows": p["deleted_rows"],
                        "share": p["deleted_share"],
                    },
                }
            )
    return out


def _where_of(partition: str) -> str:
    """A --where selecting a partition path ``a=1/b=x`` (compaction plans by the files'
    statistics, so naming the partition fields' values picks its files)."""
    terms = []
    for part in partition.split("/"):
        name, _, value = part.partition("=")
        value = urllib.parse.unquote(value)
        terms.append(f"{name} = '{value}'" if not value.lstrip("-").isdigit() else f"{name} = {value}")
    return " AND ".join(terms)


def expiry_advice(t: Table, ref: CommandRef, slots: SlotListing) -> list[dict[str, Any]]:
    """What ``lamina expire`` (default policy) would free, by its own dry run over ``slots``
    (the log's listing, shared with the other requests); the facts say too when the versions it would drop were
    committed (``expired_from_ms``, ``expired_to_ms``: the time plot shades that span)."""
    try:
        # (the maintenance function itself: t.maintenance.expire_versions is a write method, refused
        # on an offline catalog table even for a dry run)
        rep = expire.expire_versions(t.io, t.log, dry_run=True, slots=slots)
    except LaminaError as e:
        return [
            {
                "kind": "expiry",
                "severity": "info",
                "message": f"expiry cannot be previewed: {e}",
                "command": None,
                "facts": {},
            }
        ]
    versions = len(slots.versions)
    tags = len(t.tag_store.list())
    span = [t.log.try_load(v) for v in rep.expired_versions[:1] + rep.expired_versions[-1:]]
    facts = {
        "retained_versions": versions,
        "expired_versions": rep.expired_versions,
        "deleted_bytes": rep.deleted_bytes,
        "deleted_files": len(rep.deleted_files),
        "deleted_manifests": len(rep.deleted_manifests),
        "kept_for_tags": rep.kept_for_tags,
        "tags": tags,
        "earliest_retained": rep.earliest_retained,
        "expired_from_ms": span[0].timestamp_ms if span and span[0] else None,
        "expired_to_ms": span[-1].timestamp_ms if span and span[-1] else None,
    }
    if not rep.expired_versions and versions < VERSIONS_ADVICE:
        return [
            {
                "kind": "expiry",
                "severity": "ok",
                "message": f"{versions:,} versions retained; none older than the default 5 days (nothing to expire)",
                "command": None,
                "facts": facts,
            }
        ]
    if not rep.expired_versions:
        return [
            {
                "kind": "expiry",
                "severity": "info",
                "message": (
                    f"{versions:,} versions retained, none older than 5 days: "
                    f"keep fewer with --retain-last (tags keep their files)"
                ),
                "command": _cli(ref, "expire", "--retain-last", "100", "--dry-run"),
                "facts": facts,
            }
        ]
    return [
        {
            "kind": "expiry",
            "severity": "warn" if rep.deleted_bytes > 1 << 30 else "info",
            "message": (
                f"{versions:,} versions retained: expire would drop {len(rep.expired_versions):,} of them and free "
                f"{_mib(rep.deleted_bytes)} ({len(rep.deleted_files):,} files), keeping {tags} tag(s)"
            ),
            "command": _cli(ref, "expire"),
            "facts": facts,
        }
    ]
