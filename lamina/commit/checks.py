"""The named conflict checks: what a concurrent commit must not have done for an operation
to apply to the latest version, as pyiceberg's ``_validate_concurrency`` and
``table/update/validate.py`` name theirs.

The committer applies every operation to the latest version at each attempt (see
``lamina.commit.committer``); an operation that the versions committed meanwhile no
longer allow raises a typed error from one of these checks, and nothing is committed.
Each ``Operation`` declares the checks it runs in ``conflict_checks`` (an empty tuple:
it applies to any base, its change commutes with every other), and docs/architecture.md
lists them (``conflict_table``; tests/commit/test_declared_checks.py keeps the two equal).

A check is a function named ``require_*``: it returns None when the base allows the
operation and raises otherwise. Those that turn an error of the work they guard into a
conflict are context managers (``with require_live(...): ...``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import pyarrow as pa

from lamina.commit.base import Operation
from lamina.errors import (
    CommitConflict,
    InvalidPartitionSpec,
    LaminaError,
    PublishConflict,
    SchemaMismatch,
    StaleRowDelta,
    TransactionAlreadyCommitted,
    VersionNotFound,
)
from lamina.manifest.tree import MissingFiles
from lamina.spec.lineage import ROW_ID
from lamina.spec.schema import Schema, field_id_of
from lamina.spec.schema_update import InvalidSchemaChange
from lamina.spec.version import VersionManifest

F = TypeVar("F", bound=Callable[..., Any])

CHECKS: dict[str, Callable[..., Any]] = {}  # name -> check, in the order defined here


def check(fn: F) -> F:
    """Register ``fn`` as a named conflict check (its docstring's first paragraph is its rule)."""
    if not fn.__name__.startswith("require_") or not fn.__doc__:
        raise TypeError(f"a conflict check is named require_* and says its rule: {fn.__name__}")
    CHECKS[fn.__name__] = fn
    return fn


def rule_of(fn: Callable[..., Any]) -> str:
    """The rule a check enforces: the first paragraph of its docstring, on one line."""
    first = inspect.cleandoc(fn.__doc__ or "").split("\n\n", 1)[0]
    return " ".join(first.split()).replace("``", "`")


# -- files -----------------------------------------------------------------------------------


@check
@contextmanager
def require_live(operation: str) -> Iterator[None]:
    """Every file the change removes is still live: no concurrent commit removed or rewrote it.

    Enforced by the committer for every change, where the manifest tree finds a removed
    file missing (``MissingFiles``)."""
    try:
        yield
    except MissingFiles as e:
        raise CommitConflict(
            f"{operation} conflicts with a concurrent commit: {e}. "
            "Nothing was committed; re-run the operation on the latest version.",
            files=e.paths,
        ) from None


@check
def require_same_candidates(
    operation: str, version: int, keys: Iterable[tuple[Any, ...]], planned: Iterable[tuple[Any, ...]]
) -> None:
    """The files the change may affect are the ones it was computed against (no file added,
    removed or given a new deletion vector among them): StaleRowDelta otherwise."""
    now, then = set(keys), set(planned)
    if now != then:
        changed = sorted({k[0] for k in now ^ then})
        raise StaleRowDelta(
            f"{operation}: files it may affect changed in version {version} "
            f"({len(changed)} files, e.g. {changed[:3]}); nothing was committed",
            files=changed,
        )


@check
def require_app_transactions_new(base: VersionManifest, app_transactions: Mapping[str, int] | None) -> None:
    """No concurrent commit recorded the application's sequence (or a later one):
    TransactionAlreadyCommitted otherwise (an idempotent write)."""
    for app, seq in (app_transactions or {}).items():
        done = base.app_transactions.get(app)
        if done is not None and done >= seq:
            raise TransactionAlreadyCommitted(
                f"application {app!r} already committed sequence {done} (>= {seq}) at version {base.version}; "
                "nothing was committed",
                app,
                seq,
                base.version,
            )


@check
def require_not_live(refuse: Callable[[], None]) -> None:
    """No file the change registers is live in the base already (a concurrent ``add_files``
    of the same file): registering it again would double its rows.

    ``refuse``: raises (InvalidArgument, naming them) if some are (``add_files``'s check)."""
    refuse()


# -- columns and schema ----------------------------------------------------------------------


def column_identity(f: pa.Field, with_type: bool) -> tuple[Any, ...]:
    """What ``require_columns_unchanged`` compares of a column: name and field id, and type
    for a change that writes whole rows."""
    return (f.name, field_id_of(f), str(f.type)) if with_type else (f.name, field_id_of(f))


@check
def require_columns_unchanged(columns: frozenset[tuple[Any, ...]], whole_rows: bool, base: Schema, what: str) -> None:
    """The columns the change was planned on are as they were: the ones its condition uses
    (not dropped, renamed, or dropped and re-added), or, for whole rows, every column."""
    now = {column_identity(f, whole_rows) for f in base.arrow}
    if (now == columns) if whole_rows else columns <= now:
        return
    diff = columns ^ now if whole_rows else columns - now
    raise CommitConflict(
        f"{what}: a concurrent schema change (now #{base.schema_id}) changed column(s) {sorted({c[0] for c in diff})} that "
        f"it was planned on ({'it rewrites whole rows' if whole_rows else 'its condition uses them'}). "
        "Nothing was committed; run it again on the latest version"
    )


@check
def require_schema_unchanged(base: Schema, planned_schema_id: int) -> None:
    """The schema is the one the change was planned on (a transaction that changes the schema
    and writes data files keyed by the field ids it planned)."""
    if base.schema_id != planned_schema_id:
        raise CommitConflict(
            f"a concurrent commit changed the table's schema (now #{base.schema_id}, this transaction "
            f"planned its schema change and wrote its data against #{planned_schema_id}). Nothing was "
            "committed; run the transaction again on the latest version"
        )


@check
@contextmanager
def require_schema_change_applies(base: Schema, planned_schema_id: int) -> Iterator[None]:
    """The schema change still makes sense on a schema a concurrent commit changed (re-applied
    by path: e.g. not both adding a column ``email``)."""
    try:
        yield
    except InvalidSchemaChange as e:
        if base.schema_id == planned_schema_id:
            raise
        raise CommitConflict(
            f"schema change conflicts with a concurrent schema change (the schema is now #{base.schema_id}, "
            f"the change was made against #{planned_schema_id}): {e}. Nothing was committed; "
            "look at the table's schema and make the change again"
        ) from None


# -- partition spec, sort order, properties --------------------------------------------------


@check
def require_spec_unchanged(base: VersionManifest, planned: tuple[Any, ...], changes: list[str]) -> None:
    """No concurrent commit changed the partition specs the spec change was made against."""
    if base.all_partition_specs != planned:
        raise CommitConflict(
            f"partition spec change ({'; '.join(changes)}) conflicts with a concurrent spec change: the "
            f"table's spec is now #{base.partition_spec.spec_id}, the change was made against "
            f"#{planned[-1].spec_id if planned else 0}. Nothing was committed; look at the table's "
            "partition spec and make the change again"
        )


@check
def require_spec_sources_live(spec: Any, base: Schema) -> None:
    """Every source column of the new partition spec is still in the schema (a concurrent
    schema change may have dropped one)."""
    try:
        spec.partition_type(base)
    except InvalidPartitionSpec as e:
        raise CommitConflict(f"partition spec change conflicts with a concurrent schema change: {e}") from None


@check
def require_sort_sources_live(source_ids: Iterable[int], base: Schema) -> None:
    """Every column of the new sort order is still in the schema (a concurrent schema change
    may have dropped one)."""
    for source_id in source_ids:
        try:
            base.name_of(source_id)
        except SchemaMismatch:
            raise CommitConflict(
                f"the sort order change conflicts with a concurrent schema change: column id {source_id} "
                "is no longer in the table. Nothing was committed; make the change again"
            ) from None


@check
@contextmanager
def require_properties_valid(base: VersionManifest) -> Iterator[None]:
    """The updated properties are still valid on the base (a concurrent commit may have set a
    sort order, or dropped a column a property names)."""
    try:
        yield
    except LaminaError as e:
        raise CommitConflict(
            f"the property update conflicts with a concurrent change of version {base.version}: {e}"
        ) from None


# -- publishing a branch ---------------------------------------------------------------------


@check
def require_version(base: VersionManifest, expected: int | None, branch: str, into: str) -> None:
    """The target is at the version the publish expects (``expected_version``, set by an
    audit): no concurrent commit moved it."""
    if expected is not None and base.version != expected:
        raise CommitConflict(
            f"not publishing branch {branch!r}: {into!r} is at version {base.version}, not "
            f"{expected} as expected (it moved since the audit). Nothing was committed"
        )


@check
def require_unchanged_since_branch(branch: str, into: str, since: int, what: str, theirs: Any, was: Any) -> None:
    """What the branch changes of the metadata (schema, spec, sort order, properties) the
    target did not change too since the branch was made or last published: PublishConflict."""
    if theirs != was:
        raise PublishConflict(
            f"cannot publish branch {branch!r} into {into!r}: both changed the {what} since the branch "
            f"was made or last published (its version {since}). Nothing was committed; make the same change on "
            f"{into!r} first, or publish before changing it there"
        )


@check
@contextmanager
def require_last_published_kept(branch: str, into: str, last: int) -> Iterator[None]:
    """The branch's version last published into the target is not expired (what the branch
    changed since is told from it): PublishConflict otherwise."""
    try:
        yield
    except VersionNotFound:
        raise PublishConflict(
            f"cannot publish branch {branch!r} into {into!r}: its version {last}, published there last, "
            "was expired, so what the branch changed since cannot be told. Nothing was committed; make a new "
            f"branch from {into!r}'s latest version for further changes"
        ) from None


@check
def require_files_unchanged_since_branch(branch: str, into: str, since: int, files: list[str]) -> None:
    """No file whose rows the branch deleted or rewrote did the target change since the
    branch was made or last published (``files``: those it did): PublishConflict."""
    if files:
        raise PublishConflict(
            f"cannot publish branch {branch!r} into {into!r}: the branch deleted or rewrote rows of "
            f"{len(files)} file(s) that {into!r} changed since the branch was made or last published (its "
            f"version {since}): {_shown(files)}. Nothing was committed; re-run the branch's change on a "
            f"branch made from {into!r}'s latest version",
            files,
        )


@check
def require_added_files_new(branch: str, into: str, files: list[str], why: str) -> None:
    """No file the branch added is held by the target already, or was when the target branch
    was made (``files``: those that are, for the reason ``why``): PublishConflict."""
    if files:
        raise PublishConflict(
            f"cannot publish branch {branch!r} into {into!r}: {len(files)} file(s) the branch added "
            f"({_shown(files)}) {why}. Nothing was committed; make a new branch from the latest version of "
            f"{into!r} for further changes",
            files,
        )


@check
def require_row_ids_unclaimed(branch: str, into: str, files: list[str]) -> None:
    """No file a rebased publish adds stores row ids from the branch's counter, which the
    target may have handed out since (``files``: those that do): PublishConflict."""
    if files:
        raise PublishConflict(
            f"cannot publish branch {branch!r} into {into!r} by rebase: {len(files)} file(s) hold rows the "
            f"branch inserted and then rewrote, whose row ids ({ROW_ID}) were taken from the branch's counter and "
            f"may have been handed out on {into!r} since. Nothing was committed; publish before "
            f"{into!r} moves (a fast-forward keeps the ids), or re-run the branch's changes on a new branch",
            files,
        )


def _shown(files: list[str]) -> str:
    return ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")


# -- the table of declarations ---------------------------------------------------------------


def conflict_table(operations: Iterable[type[Operation]]) -> str:
    """docs/architecture.md's table: each operation and the checks it declares
    (``conflict_checks``), then each check and its rule."""
    rows = ["| Operation | Conflict checks |", "|---|---|"]
    for op in sorted(operations, key=lambda c: c.__name__):
        declared = op.conflict_checks or ()
        names = ", ".join(f"`{fn.__name__}`" for fn in declared) or "none: applies to any base"
        rows.append(f"| `{op.__name__}` | {names} |")
    rows += ["", "| Check | Rule |", "|---|---|"]
    rows += [f"| `{name}` | {rule_of(fn)} |" for name, fn in CHECKS.items()]
    return "\n".join(rows)
