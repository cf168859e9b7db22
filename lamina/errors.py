"""Every exception Lamina raises on purpose, in one module (as delta-rs does).

Each message says what is wrong and what to do about it. Catch ``LaminaError``
for all of them.
"""

from __future__ import annotations


class LaminaError(Exception):
    """Base class of all Lamina errors."""


# --- storage -------------------------------------------------------------------


class StorageError(LaminaError):
    """The object store failed in a way that is not one of the cases below."""


class NotFound(StorageError):
    """An object that should exist does not."""


class AlreadyExists(StorageError):
    """A put-if-absent found the object already there."""


class PermissionDenied(StorageError):
    """The store refused the credentials or the operation."""


class ReadOnlyStorage(PermissionDenied):
    """The file system or store holding the table is read-only (EROFS): nothing can be written or deleted."""


class InvalidUri(LaminaError, ValueError):
    """A table location could not be understood."""


# --- table format ---------------------------------------------------------------


class TableNotFound(LaminaError):
    """The path holds no Lamina table."""


class TableAlreadyExists(LaminaError):
    """create_table found a table at the location."""


class CorruptMetadata(LaminaError):
    """A metadata file is truncated, not parseable or inconsistent."""


class MissingFile(CorruptMetadata):
    """A file a version references (data, deletion vector or manifest) is gone. A read of a
    version that expiry has since removed sees this too: ``Scan`` then raises
    VersionNotFound instead (see lamina.data.scan)."""


class UnsupportedFeature(LaminaError):
    """The table needs a reader or writer feature this Lamina does not know."""


class UnconvertibleTable(UnsupportedFeature):
    """``lamina.convert`` refused a source table that uses something Lamina cannot represent
    (equality deletes, a type, a Delta reader feature, a column stored only in directory
    names); ``feature`` names it. Nothing was written."""

    def __init__(self, message: str, feature: str) -> None:
        super().__init__(message)
        self.feature = feature


class VersionNotFound(LaminaError):
    """A requested version never existed or has been expired."""


class ChangesUnavailable(VersionNotFound):
    """A change feed range reaches versions whose changes cannot be computed (expired, or
    older than row lineage); ``oldest`` is the oldest start version still answerable."""

    def __init__(self, message: str, oldest: int | None) -> None:
        super().__init__(message)
        self.oldest = oldest


class ChangeCommitInStream(LaminaError):
    """A stream of a table's appends met a version that deletes or updates rows; skip such
    versions (``skipChangeCommits``) or stream the change feed instead (``readChangeFeed``)."""


# --- user input ------------------------------------------------------------------


class TagNotFound(VersionNotFound):
    """No tag of that name."""


class RowLineageNotEnabled(UnsupportedFeature):
    """Row ids were asked of a table (or version) without row lineage."""


class IcebergUnsupported(UnsupportedFeature):
    """The table (a column type, a default) has something Iceberg v3 cannot represent, so no
    Iceberg view of it can be written (lamina.iceberg); the message names it."""


class TagAlreadyExists(LaminaError):
    """A tag of that name exists; tags are never overwritten silently."""


class InvalidTagName(LaminaError, ValueError):
    """A tag name that could be mistaken for a version or a path."""


class BranchNotFound(VersionNotFound):
    """No branch of that name (or it was deleted while a commit to it was landing)."""


class BranchAlreadyExists(LaminaError):
    """A branch (or a tag) of that name exists; branches are never overwritten."""


class InvalidBranchName(InvalidTagName):
    """A branch name that breaks the tag rules, is ``main``, or could be read as a version."""


class SchemaMismatch(LaminaError, ValueError):
    """Data does not fit the table schema."""


class InvalidPredicate(LaminaError, ValueError):
    """A ``where`` predicate could not be parsed or bound to the schema."""


class EvaluationError(LaminaError, ValueError):
    """A predicate or value expression failed on a row it was evaluated for, as Spark's ANSI
    mode fails: an integer overflow, a division by zero, a value a CAST cannot convert, an
    array index out of range. Nothing is changed; TRY_CAST and try_element_at give NULL instead."""


class InvalidPartitionSpec(LaminaError, ValueError):
    """A ``partition_by`` entry is not understood or does not fit the schema."""


class InvalidArgument(LaminaError, ValueError):
    """An argument is out of range or inconsistent."""


class PartitionSpecMismatch(InvalidPartitionSpec, InvalidArgument):
    """A write's partitioning (Spark's ``partitionBy``, ``partition_by=``) differs from the existing
    table's: a write never changes a table's partitioning."""


class PropertyCannotChange(InvalidArgument):
    """A table property the format fixes when the table is created (or lets only grow) was
    asked to change; the message says why. Nothing was committed."""


class UnsupportedStatement(InvalidArgument):
    """A SQL statement on a Lamina table (``lamina.spark.sql``) uses a clause Lamina does not
    carry out; ``clause`` names it. Nothing was committed."""

    def __init__(self, message: str, clause: str) -> None:
        super().__init__(message)
        self.clause = clause


# --- commits ---------------------------------------------------------------------


class CommitConflict(LaminaError):
    """A concurrent commit changed what this one depends on, and retries did not resolve it.
    ``files``: the data files that clash, when the conflict is about files."""

    def __init__(self, message: str, files: list[str] | None = None) -> None:
        super().__init__(message)
        self.files = list(files or [])


class CommitRetriesExhausted(CommitConflict):
    """The commit kept losing the race for its version slot until the retry budget ran out."""


class PublishConflict(CommitConflict):
    """A branch's changes clash with what was committed to the target since the branch was
    made: the files it rewrote were changed there too. ``files`` names them."""


class StaleRowDelta(CommitConflict):
    """A precomputed row-level change met a base where the files it may affect changed
    (a scanned file got another DV or was removed, or a new file may hold affected rows).
    Nothing was committed; the caller recomputes on the newest version."""


class TransactionAlreadyCommitted(LaminaError):
    """An idempotent write (application id, sequence number) was already committed; nothing new was committed.

    Streaming writers record ``{app_id: batch_id}`` with each commit; replaying a
    batch at or below the recorded sequence raises this instead of duplicating rows.
    """

    def __init__(self, message: str, app_id: str = "", sequence: int = -1, version: int = -1) -> None:
        super().__init__(message)
        self.app_id = app_id
        self.sequence = sequence
        self.version = version  # the version that already holds app_id at >= sequence


class CommitStateUnknown(LaminaError):
    """The store did not say whether the commit landed, and it could not be resolved."""


# --- catalogs ----------------------------------------------------------------------


class CatalogError(LaminaError):
    """A catalog operation failed; the subclasses say why."""


class InvalidCatalogUri(InvalidUri, CatalogError):
    """A catalog URI with an unknown scheme or missing parts."""


class CatalogNotFound(CatalogError):
    """No catalog where the URI points (an embedded SQLite catalog's database file, or a
    directory catalog's warehouse, is not there), and the caller did not ask to create one."""


class CatalogUnreachable(CatalogError):
    """The catalog database could not be reached (the message names the URI, never the password)."""


class InvalidIdentifier(CatalogError, ValueError):
    """A namespace or table name that is not letters, digits, '_' and '-' of bounded length."""


class NamespaceNotFound(CatalogError):
    """No namespace of that name."""


class NamespaceAlreadyExists(CatalogError):
    """A namespace of that name exists."""


class NamespaceNotEmpty(CatalogError):
    """A namespace still holding tables cannot be dropped."""


class CatalogTableNotFound(TableNotFound, CatalogError):
    """The catalog has no table of that name."""


class CatalogTableAlreadyExists(TableAlreadyExists, CatalogError):
    """The catalog already has a table of that name (or at that location)."""


class TableOffline(CatalogError):
    """The table is offline: it stays readable but refuses writes and maintenance."""


class TableInUse(CatalogError):
    """The table has writes in flight; purging it now would delete files under them."""


class CatalogManaged(UnsupportedFeature):
    """A catalog-managed table was written by path; its commits must go through its catalog."""


class CatalogTransactionConflict(CommitConflict, CatalogError):
    """A catalog transaction clashed with a concurrent commit on one of its tables and could
    not be re-applied: ``table`` names the table, ``files`` the data files that clash.
    Nothing was committed to any table."""

    def __init__(self, message: str, table: str, files: list[str] | None = None) -> None:
        super().__init__(message, files)
        self.table = table


class TransactionsUnsupported(CatalogError):
    """This catalog cannot commit several tables atomically (the directory catalog has no
    multi-row compare-and-swap): use a SQL catalog (SQLite or PostgreSQL)."""


# --- the explorer (lamina ui) ----------------------------------------------------------


class ExplorerError(LaminaError):
    """A request the explorer refuses; ``status``: the HTTP status it answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# --- internal: handled where raised, never reaching a caller ---------------------------


class FooterError(ValueError):
    """A Parquet footer ``lamina.data.parquet_footer`` cannot read or does not join: the caller
    writes the rows instead (a staged file is not copied as it is)."""
