"""Branches: named version logs of their own, made from a version of another branch.

A branch's record ``_lamina/branches/<name>.json`` holds its name, its id (which names its
log's directory, ``_lamina/branch_logs/<id>/``), where it was made from (branch and
version), its retention, and ``base_manifest``: a full copy of the version it was made
from, as a tag holds one. The copy keeps the base readable (and its files kept) after the
source branch expires that version, and is what a publish compares the branch's head with.

Branch names follow the tag rules (lamina.spec.tag), ``main`` is the table's root log, and a
name may not be a tag's: ``version="x"`` reads tag ``x``, ``branch="x"`` branch ``x``, and
one name meaning both would be a trap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from lamina.errors import CorruptMetadata, InvalidArgument, InvalidBranchName, InvalidTagName
from lamina.spec.features import BRANCHES
from lamina.spec.layout import BRANCHES_DIR, MAIN_BRANCH, LogLayout, branch_log
from lamina.spec.tag import validate_tag_name
from lamina.spec.version import VersionManifest
from lamina.timeutil import iso_ms

__all__ = ["BRANCHES", "BranchRecord", "branch_path", "check_retention", "validate_branch_name"]


def validate_branch_name(name: Any) -> str:
    """The name, or InvalidBranchName saying what is wrong with it."""
    if name == MAIN_BRANCH:
        raise InvalidBranchName(f"{MAIN_BRANCH!r} is the table's main branch, which always exists; choose another name")
    try:
        validate_tag_name(name)
    except InvalidTagName as e:
        raise InvalidBranchName(
            str(e).replace("a tag name", "a branch name").replace("tag name", "branch name")
        ) from None
    return name


def branch_path(name: str) -> str:
    return f"{BRANCHES_DIR}/{validate_branch_name(name)}.json"


def check_retention(retain_last: Any, max_age_ms: Any) -> None:
    if retain_last is not None and (
        isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1
    ):
        raise InvalidArgument(
            f"retain_last must be an int >= 1 (a branch's latest version is always kept), not {retain_last!r}"
        )
    if max_age_ms is not None and (isinstance(max_age_ms, bool) or not isinstance(max_age_ms, int) or max_age_ms < 0):
        raise InvalidArgument(f"max_age must be a duration >= 0, not {max_age_ms!r}")


@dataclass(frozen=True)
class BranchRecord:
    name: str
    branch_id: str  # 32 hex: names the branch's log directory
    base_branch: str  # the branch it was made from (its name then)
    base: VersionManifest  # the version it was made from, copied whole
    created_at_ms: int
    retain_last: int | None = None  # expiry keeps at least this many of the branch's newest versions
    max_age_ms: int | None = None  # expiry's default cutoff on the branch: versions older than this

    @property
    def base_version(self) -> int:
        return self.base.version

    def __repr__(self) -> str:
        """One line: the name, where it was made from, when, its retention (not the copy of the base)."""
        retention = "".join(
            f", {k}={v}"
            for k, v in (("retain_last", self.retain_last), ("max_age_ms", self.max_age_ms))
            if v is not None
        )
        return (
            f"BranchRecord(name={self.name!r}, base={self.base_branch}@{self.base_version}, "
            f"created={iso_ms(self.created_at_ms)}{retention})"
        )

    @property
    def layout(self) -> LogLayout:
        return branch_log(self.branch_id)

    def renamed(self, name: str) -> BranchRecord:
        return replace(self, name=name)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "branch_format": 1,
                "name": self.name,
                "branch_id": self.branch_id,
                "base_branch": self.base_branch,
                "base_version": self.base.version,
                "created_at_ms": self.created_at_ms,
                "retain_last": self.retain_last,
                "max_age_ms": self.max_age_ms,
                "base_manifest": json.loads(self.base.to_json()),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> BranchRecord:
        try:
            j = json.loads(data)
            vm = VersionManifest.from_dict(j["base_manifest"], where)
            if int(j["base_version"]) != vm.version:
                raise ValueError(f"base_version {j['base_version']} != manifest version {vm.version}")
            bid = str(j["branch_id"])
            if len(bid) != 32 or any(c not in "0123456789abcdef" for c in bid):
                raise ValueError(f"branch_id {bid!r} is not 32 hex digits")
            return cls(
                name=str(j["name"]),
                branch_id=bid,
                base_branch=str(j["base_branch"]),
                base=vm,
                created_at_ms=int(j["created_at_ms"]),
                retain_last=None if j.get("retain_last") is None else int(j["retain_last"]),
                max_age_ms=None if j.get("max_age_ms") is None else int(j["max_age_ms"]),
            )
        except CorruptMetadata:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptMetadata(
                f"branch record {where} is corrupt ({type(e).__name__}: {e}); delete the branch with "
                "`lamina branch delete` and make it again from a version"
            ) from None
