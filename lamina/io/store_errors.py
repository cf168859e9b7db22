"""What a store's or the OS's error means for a table: the Lamina exception it becomes, with
what to do about it. FileIO raises storage errors only through ``translate``."""

from __future__ import annotations

import errno
import re

import obstore.exceptions as oe

from lamina.errors import AlreadyExists, NotFound, PermissionDenied, ReadOnlyStorage, StorageError

__all__ = ["translate"]

# What an OS error means for a table, and what to do about it (local disk; obstore's
# errors carry the same numbers as "(os error N)").
_OS_ERRORS: dict[int, tuple[type[StorageError], str]] = {
    errno.EROFS: (
        ReadOnlyStorage,
        "the file system is read-only (EROFS); remount it read-write, or run this where the table is writable",
    ),
    errno.EACCES: (PermissionDenied, "permission denied (EACCES); check the permissions of the table directory"),
    errno.EPERM: (PermissionDenied, "operation not permitted (EPERM); check the permissions of the table directory"),
    errno.ENOSPC: (StorageError, "no space left on the device (ENOSPC); free space and retry"),
    errno.EDQUOT: (StorageError, "disk quota exceeded (EDQUOT); free space or raise the quota and retry"),
    errno.ELOOP: (StorageError, "its symbolic links form a loop (ELOOP); fix the links under the table directory"),
    errno.ENAMETOOLONG: (
        StorageError,
        "the path is too long for the file system (ENAMETOOLONG); use a shorter location",
    ),
    errno.EIO: (StorageError, "the device reported an I/O error (EIO); check the disk, then retry"),
}
_OS_ERROR_IN_MESSAGE = re.compile(r"\(os error (\d+)\)")


def _os_errno(e: Exception) -> int | None:
    if isinstance(e, OSError) and e.errno is not None:
        return e.errno
    m = _OS_ERROR_IN_MESSAGE.search(str(e))
    return int(m.group(1)) if m else None


def translate(e: Exception, what: str) -> Exception:
    """The Lamina exception for ``e``, raised by the operation ``what`` (e.g. "put x")."""
    if isinstance(e, oe.AlreadyExistsError | oe.PreconditionError | FileExistsError):
        return AlreadyExists(f"{what}: object already exists")
    if isinstance(e, oe.NotFoundError | FileNotFoundError):
        return NotFound(f"{what}: not found")
    known = _OS_ERRORS.get(_os_errno(e))  # type: ignore[arg-type]
    if known is not None:
        cls, hint = known
        return cls(f"{what}: {hint}")
    if isinstance(e, oe.PermissionDeniedError | oe.UnauthenticatedError | PermissionError):
        return PermissionDenied(f"{what}: permission denied ({e}); check the store credentials")
    return StorageError(f"{what}: {type(e).__name__}: {e}")
