"""``ExpireReport``: what one expiry run (or a tag's deletion) expired, deleted and kept, and why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lamina.maintenance.reports import short_repr

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class ExpireReport:
    dry_run: bool
    expired_versions: list[int] = field(default_factory=list)
    earliest_retained: int | None = None
    expired_tags: list[str] = field(default_factory=list)
    deleted_manifests: list[str] = field(default_factory=list)
    deleted_files: list[str] = field(default_factory=list)  # data and deletion-vector files
    deleted_bytes: int = 0
    kept_for_tags: int = 0  # candidate data files kept because a tag or retained version needs them
    # True when versions older_than/retain_last would expire were kept because they were
    # superseded less than reader_grace ago (pass reader_grace=timedelta(0) if no reader runs)
    held_by_reader_grace: bool = False
    # Why the versions before the latest that did not expire were kept, each counted once, by
    # the first rule that keeps it: among the ``retain_last`` newest; superseded after the
    # ``older_than`` cutoff (younger than the retention); superseded less than the reader
    # grace ago. With the rules the run applied: the cutoff (epoch ms, None when only
    # ``retain_last`` was given), the grace and ``retain_last``.
    kept_by_retain_last: int = 0
    kept_by_age: int = 0
    kept_by_reader_grace: int = 0
    cutoff_ms: int | None = None
    reader_grace_ms: int = 0
    retain_last: int | None = None
    freed_slots: int = 0  # slot files deleted: their record is older than the slot retention
    branches: dict[str, ExpireReport] = field(default_factory=dict)  # each branch's, when main expired them too
    seconds: float = 0.0

    __repr__ = short_repr

    @property
    def deleted_version_files(self) -> int:
        return len(self.expired_versions)
