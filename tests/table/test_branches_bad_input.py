"""Bad input to branches: a typed error that names what is wrong, and
nothing changed on disk.

Table-driven like test_bad_input.py: each case is a call on a table with versions, an
expired version, a tag ``keep`` and two branches (``dev`` with a commit, ``qa``), the
``lamina.errors`` class it must raise and a word its message must hold. Around every call
every file under the table (path and bytes) must stay the same, and main and ``dev`` must
still read their rows. The first branch of a table commits writer feature ``branches`` on
main: a first ``create_branch`` that fails must not have committed it either.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa
import pytest

import lamina
from lamina import errors as E

from support.files import ids_of, table_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])
NOW = timedelta(0)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids)}, schema=SCHEMA)


class World:
    """main: versions 0..3, 0 and 1 expired (by retain_last), tag ``keep`` on version 2;
    with ``branches``, branch ``dev`` (one commit) and ``qa`` (none), the first of which
    committed writer feature ``branches`` as main's version 4."""

    def __init__(self, root: str, branches: bool = True) -> None:
        self.uri = os.path.join(root, "t")
        self.t = lamina.create_table(self.uri, SCHEMA)
        for i in range(1, 4):
            self.t.append(rows(i))
        self.t.tags.create("keep", 2)
        self.t.maintenance.expire_versions(retain_last=2, reader_grace=NOW)
        assert self.t.log.list_versions() == [2, 3]
        self.expired = 1
        if branches:
            self.t.branches.create("dev").append(rows(10))
            self.t.branches.create("qa")

    def state(self) -> tuple:
        fresh = lamina.open_table(self.uri)
        reads = [ids_of(fresh.to_arrow())]
        if any(r.name == "dev" for r in fresh.branches.list()):
            reads.append(ids_of(fresh.branch("dev").to_arrow()))
        return table_files(self.uri), reads


# (id, call on World, error class, a word the message holds)
CASES = [
    # unknown branches
    ("handle-unknown", lambda w: w.t.branch("nope"), E.BranchNotFound, "nope"),
    ("open-unknown", lambda w: lamina.open_table(w.uri, version="nope"), E.TagNotFound, "nope"),  # no tag or branch
    ("scan-unknown", lambda w: w.t.scan(version="nope"), E.TagNotFound, "nope"),
    ("from-unknown", lambda w: w.t.branches.create("new", version="nope"), E.TagNotFound, "nope"),
    ("rename-unknown", lambda w: w.t.branches.rename("nope", "new"), E.BranchNotFound, "nope"),
    ("delete-unknown", lambda w: w.t.branches.delete("nope"), E.BranchNotFound, "nope"),
    ("publish-unknown", lambda w: w.t.branches.publish("nope"), E.BranchNotFound, "nope"),
    ("publish-into-unknown", lambda w: w.t.branches.publish("dev", into="nope"), E.BranchNotFound, "nope"),
    # names taken
    ("create-existing", lambda w: w.t.branches.create("dev"), E.BranchAlreadyExists, "dev"),
    ("create-existing-from-branch", lambda w: w.t.branch("qa").branches.create("dev"), E.BranchAlreadyExists, "dev"),
    ("create-tag-name", lambda w: w.t.branches.create("keep"), E.BranchAlreadyExists, "tag"),
    ("tag-branch-name", lambda w: w.t.tags.create("dev"), E.TagAlreadyExists, "branch"),
    ("tag-branch-name-on-branch", lambda w: w.t.branch("dev").tags.create("qa"), E.TagAlreadyExists, "branch"),
    ("rename-existing", lambda w: w.t.branches.rename("dev", "qa"), E.BranchAlreadyExists, "qa"),
    ("rename-to-itself", lambda w: w.t.branches.rename("dev", "dev"), E.BranchAlreadyExists, "dev"),
    ("rename-tag-name", lambda w: w.t.branches.rename("dev", "keep"), E.BranchAlreadyExists, "tag"),
    # bad names
    *[
        (f"name-{i}", (lambda n: lambda w: w.t.branches.create(n))(n), E.InvalidBranchName, word)
        for i, (n, word) in enumerate([
            ("main", "main"), ("7", "number"), ("-3", "number"), ("../x", ".."), ("a/b", "'/'"), ("", "empty"),
            (".hidden", "'.'"), ("x y", "' '"), (5, "string"), ("x" * 300, "limit"),
        ])
    ],
    ("rename-to-main", lambda w: w.t.branches.rename("dev", "main"), E.InvalidBranchName, "main"),
    ("rename-to-path", lambda w: w.t.branches.rename("dev", "../x"), E.InvalidBranchName, ".."),
    ("rename-main", lambda w: w.t.branches.rename("main", "trunk"), E.InvalidBranchName, "main"),
    ("delete-main", lambda w: w.t.branches.delete("main"), E.InvalidBranchName, "main"),
    ("delete-path", lambda w: w.t.branches.delete("../x"), E.InvalidBranchName, ".."),
    ("handle-path", lambda w: w.t.branch("a/b"), E.InvalidBranchName, "'/'"),
    # sources that do not exist (any more)
    ("from-expired", lambda w: w.t.branches.create("new", version=w.expired), E.VersionNotFound, str(1)),
    ("from-future", lambda w: w.t.branches.create("new", version=99), E.VersionNotFound, "99"),
    ("from-branch-future", lambda w: w.t.branch("dev").branches.create("new", version=99), E.VersionNotFound, "99"),
    ("from-unknown-tag", lambda w: w.t.branches.create("new", version="nope"), E.TagNotFound, "nope"),
    ("from-old-timestamp", lambda w: w.t.branches.create("new", timestamp=0), E.VersionNotFound, "timestamp"),
    ("from-version-and-timestamp", lambda w: w.t.branches.create("new", version=2, timestamp=0), E.InvalidArgument, "not both"),
    ("retain-0", lambda w: w.t.branches.create("new", retain_last=0), E.InvalidArgument, "retain_last"),
    ("retain-bool", lambda w: w.t.branches.create("new", retain_last=True), E.InvalidArgument, "retain_last"),
    ("max-age-negative", lambda w: w.t.branches.create("new", max_age=timedelta(days=-1)), E.InvalidArgument, "max_age"),
    # publish
    ("publish-into-itself", lambda w: w.t.branches.publish("dev", into="dev"), E.InvalidArgument, "itself"),
    ("publish-main", lambda w: w.t.branches.publish("main", into="dev"), E.InvalidArgument, "main"),
    ("publish-expected-wrong", lambda w: w.t.branches.publish("dev", expected_version=w.t.version - 1), E.CommitConflict, "expected"),
]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(tmp_path, call, error, word):
    w = World(str(tmp_path))
    before = w.state()
    with pytest.raises(error) as e:
        call(w)
    assert word.lower() in str(e.value).lower(), str(e.value)
    assert w.state() == before


FIRST_BRANCH_CASES = [c for c in CASES if c[0].startswith(("from-", "name-", "create-tag-name", "retain", "max-age"))
                      and "branch" not in c[0]]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in FIRST_BRANCH_CASES], ids=[c[0] for c in FIRST_BRANCH_CASES])
def test_a_refused_first_branch_commits_nothing(tmp_path, call, error, word):
    """The first branch turns on writer feature ``branches`` with a version of main: not
    when the branch is refused."""
    w = World(str(tmp_path), branches=False)
    before = w.state()
    with pytest.raises(error):
        call(w)
    assert w.state() == before
    assert w.t.refresh().version == 3

