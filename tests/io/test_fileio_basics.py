"""lamina.io.FileIO, the only way Lamina touches storage: the same behaviour on local disk,
memory:// and S3 (a local moto server, the session's ``s3`` fixture).

Reads and writes, the three create semantics (``put`` overwrites, ``put_if_absent`` never,
``put_new`` succeeds again only on identical bytes), deletes that are idempotent,
listings (recursive ``list``/``walk``, one-level ``list_dir``/``list_names``), and paths
that try to leave the table root refused with ``InvalidUri`` before anything is touched.
"""

from __future__ import annotations

import os
import sys
import uuid
from datetime import datetime

import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support import BUCKET  # noqa: E402  (the s3 fixture creates it)

from lamina.errors import AlreadyExists, InvalidUri, NotFound, StorageError  # noqa: E402
from lamina.io import FileIO  # noqa: E402


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.xdist_group("s3"))])
def store(request, tmp_path):
    """A function making FileIOs rooted under one fresh location of the backend: ``store(sub)``."""
    name = uuid.uuid4().hex[:12]
    if request.param == "local":
        return lambda sub="t": FileIO(str(tmp_path / sub))
    if request.param == "memory":
        return lambda sub="t": FileIO(f"memory://fileio-{name}/{sub}")
    s3 = request.getfixturevalue("s3")
    return lambda sub="t": FileIO(f"s3://{BUCKET}/{name}/{sub}", s3.storage_options)


def paths_of(io: FileIO, prefix: str = "") -> list[str]:
    return sorted(o.path for o in io.walk(prefix))


# -- reading and writing --------------------------------------------------------------------


def test_put_get_and_sizes(store):
    io = store()
    io.put("data/a.bin", b"first")
    assert io.get("data/a.bin") == b"first" and io.exists("data/a.bin") and io.size("data/a.bin") == 5
    io.put("data/a.bin", b"second, longer")  # put replaces whatever is there
    assert io.get("data/a.bin") == b"second, longer" and io.size("data/a.bin") == 14
    assert io.get_optional("data/a.bin") == b"second, longer"
    assert io.get_range("data/a.bin", 8, 6) == b"longer"
    io.put("data/buf.bin", pa.py_buffer(b"\x00\x01arrow"))  # an Arrow buffer (an encoded Parquet file)
    assert io.get("data/buf.bin") == b"\x00\x01arrow"
    assert io.sizes(pa.array(["data/a.bin", "data/buf.bin", "data/none.bin"])).to_pylist() == [14, 7, None]


def test_a_missing_object(store):
    io = store()
    io.put("data/other.bin", b"x")  # the location exists
    assert io.get_optional("data/missing.bin") is None and not io.exists("data/missing.bin")
    for read in (io.get, io.size, lambda p: io.get_range(p, 0, 1)):
        with pytest.raises(NotFound, match="data/missing.bin"):
            read("data/missing.bin")
    io.delete("data/missing.bin")  # deletes are idempotent
    io.delete_many(["data/missing.bin", "data/gone/too.bin"])
    assert paths_of(io) == ["data/other.bin"]


def test_put_if_absent_never_replaces_an_object(store):
    io = store()
    io.put_if_absent("_lamina/versions/v.json", b"winner")
    for data in (b"loser", b"winner"):  # the commit point: even the same bytes are someone else's
        with pytest.raises(AlreadyExists):
            io.put_if_absent("_lamina/versions/v.json", data)
    assert io.get("_lamina/versions/v.json") == b"winner"


def test_put_new_succeeds_again_only_on_identical_bytes(store):
    io = store()
    io.put_new("data/f.parquet", b"these bytes")
    io.put_new("data/f.parquet", b"these bytes")  # our own retry: the object is ours
    for other in (b"other bytes", b"these bytez", b"these bytes and more"):
        with pytest.raises(AlreadyExists, match="different content"):
            io.put_new("data/f.parquet", other)
    assert io.get("data/f.parquet") == b"these bytes"


def test_put_in_place_leaves_one_writers_bytes_padded_to_the_old_length(store):
    io = store()
    io.put_in_place("_lamina/h.json", b'{"v": 100}')  # nothing there: created
    assert io.get("_lamina/h.json") == b'{"v": 100}'
    io.put_in_place("_lamina/h.json", b'{"v": 7}')  # shorter: no tail of the old bytes is left
    got = io.get("_lamina/h.json")
    assert got.rstrip(b" ") == b'{"v": 7}' and set(got[len(b'{"v": 7}'):]) <= {ord(" ")}
    io.put_in_place("_lamina/h.json", b'{"v": 1000000}')
    assert io.get("_lamina/h.json") == b'{"v": 1000000}'


def test_put_in_place_on_local_disk_keeps_the_file_and_replaces_a_much_larger_one(tmp_path):
    io = FileIO(str(tmp_path / "t"))
    io.put("_lamina/h.json", b"x" * 10)
    inode = os.stat(io.local_path("_lamina/h.json")).st_ino
    for data in (b"a" * 20, b"b" * 5, b"c" * 30):
        io.put_in_place("_lamina/h.json", data)
        assert os.stat(io.local_path("_lamina/h.json")).st_ino == inode  # no new file
        assert io.get("_lamina/h.json").rstrip(b" ") == data
    io.put("_lamina/h.json", b"y" * 100_000)  # far longer than any padding worth writing
    io.put_in_place("_lamina/h.json", b"small")
    assert io.get("_lamina/h.json") == b"small"


def test_delete_and_delete_many(store):
    io = store()
    names = [f"data/p={i % 2}/f{i}.parquet" for i in range(6)]
    for n in names:
        io.put(n, n.encode())
    io.delete(names[0])
    io.delete_many(names[1:4] + ["data/never.parquet"])
    assert paths_of(io) == sorted(names[4:])
    io.delete_many([])
    assert [io.get(n) for n in names[4:]] == [n.encode() for n in names[4:]]


# -- listings --------------------------------------------------------------------------------

TREE = {"a/x.json": b"1", "a/b/y.json": b"22", "a/b/c/z.json": b"333", "ab/w.json": b"4444", "r.json": b"55555"}


def test_list_walk_and_list_dir(store):
    io = store()
    for p, data in TREE.items():
        io.put(p, data)
    listed = io.list("a")
    assert [o.path for o in listed] == ["a/b/c/z.json", "a/b/y.json", "a/x.json"]  # sorted, not "ab/"
    assert [o.size for o in listed] == [3, 2, 1]
    assert all(isinstance(o.last_modified, datetime) for o in listed)
    assert io.list("nothing/here") == []
    assert paths_of(io) == sorted(TREE)
    assert paths_of(io, "a/b") == ["a/b/c/z.json", "a/b/y.json"]
    assert {o.path: o.size for o in io.walk()} == {p: len(d) for p, d in TREE.items()}
    top = io.list_dir("a")
    assert top.column("path").to_pylist() == ["a/x.json"] and top.column("size").to_pylist() == [1]
    assert sorted(io.list_dir("").column("path").to_pylist()) == ["r.json"]


def test_list_names_gives_the_file_names_directly_under_a_prefix(store):
    """Its docstring: "Sorted file names directly under ``prefix``" -- the same on every
    store: no subdirectory names (local disk lists them), no deeper objects (object stores
    list them)."""
    io = store()
    for p, data in TREE.items():
        io.put(p, data)
    assert io.list_names("a/b") == ["y.json"]
    assert io.list_names("a") == ["x.json"]
    assert io.list_names("nothing") == []


def test_a_prefix_is_not_an_object(store):
    """Where objects live under ``a/b/``, ``a/b`` itself is no object, on every store."""
    io = store()
    io.put("a/b/y.json", b"22")
    assert not io.exists("a/b") and io.get_optional("a/b") is None
    for read in (io.get, io.size):
        with pytest.raises(NotFound):
            read("a/b")


def test_locations_sharing_a_prefix_do_not_see_each_others_objects(store):
    one, longer = store("p1"), store("p12")
    one.put("data/x.json", b"one")
    longer.put("data/x.json", b"longer")
    longer.put("data/y.json", b"only in p12")
    assert paths_of(one) == ["data/x.json"] and one.get("data/x.json") == b"one"
    assert [o.path for o in one.list("data")] == ["data/x.json"]
    assert not one.exists("data/y.json")
    one.delete_many(["data/x.json", "data/y.json"])
    assert paths_of(longer) == ["data/x.json", "data/y.json"]


def test_two_fileios_on_one_memory_location_share_its_objects():
    uri = f"memory://fileio-{uuid.uuid4().hex[:12]}/t"
    FileIO(uri).put("data/x.json", b"shared")
    assert FileIO(uri).get("data/x.json") == b"shared"
    assert FileIO(uri + "/").get("data/x.json") == b"shared"


# -- paths that leave the root, and locations that are none -----------------------------------

HOSTILE = ["../escape", "/etc/passwd", "a/../../escape", "a\\b", "./x", "a/./b", "a//b", "a/", "..", "a\x00b", "a\nb"]


def _every_call(io: FileIO):
    """Each FileIO method taking a path inside the table, as (name, call(path)); ``local_path``
    only where there is one (elsewhere it is None, whatever the path)."""
    calls = [
        ("get", io.get), ("get_optional", io.get_optional), ("get_range", lambda p: io.get_range(p, 0, 1)),
        ("exists", io.exists), ("size", io.size), ("put", lambda p: io.put(p, b"x")),
        ("put_if_absent", lambda p: io.put_if_absent(p, b"x")), ("put_new", lambda p: io.put_new(p, b"x")),
        ("delete", io.delete), ("delete_many", lambda p: io.delete_many(["ok.json", p])),
        ("list", io.list), ("list_names", io.list_names), ("list_dir", io.list_dir), ("walk", lambda p: list(io.walk(p))),
    ]
    return calls + ([("local_path", io.local_path)] if io.is_local else [])


def test_a_path_leaving_the_root_is_refused_before_anything_is_touched(store, tmp_path):
    io = store("t/inner")
    io.put("ok.json", b"ok")
    outer = store("t")
    before = {o.path: outer.get(o.path) for o in outer.walk()}
    not_refused = []
    for path in HOSTILE:
        for name, call in _every_call(io):
            try:
                call(path)
            except InvalidUri as e:
                assert "relative to its root" in str(e), (name, path, str(e))
            else:
                not_refused.append((name, path))
    assert not_refused == [], f"hostile paths not refused: {not_refused}"
    assert {o.path: outer.get(o.path) for o in outer.walk()} == before  # nothing written or deleted
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("uri", ["", "ftp://host/t", "memory://", "s3://", "file://host/t", "t\x00u", None])
def test_a_location_that_is_none_is_refused(uri):
    with pytest.raises(InvalidUri):
        FileIO(uri)


# -- local disk: puts by plain system calls (FileIO._local_put) -------------------------------


def test_local_racing_creates_leave_one_whole_winner_and_no_staging_files(tmp_path):
    """Writers racing put_if_absent for one name (a version slot): exactly one lands, the
    object holds its bytes whole, every other gets AlreadyExists, and no staging file stays."""
    from concurrent.futures import ThreadPoolExecutor

    io = FileIO(str(tmp_path / "t"))
    payloads = [bytes([i]) * (1 << 16) for i in range(16)]  # 64 KiB each: a torn write would show

    def attempt(data: bytes) -> bool:
        try:
            io.put_if_absent("_lamina/versions/v.json", data)
            return True
        except AlreadyExists:
            return False

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(attempt, payloads))
    assert won.count(True) == 1
    assert io.get("_lamina/versions/v.json") == payloads[won.index(True)]
    assert os.listdir(tmp_path / "t" / "_lamina" / "versions") == ["v.json"]
    io.put("_lamina/hint.json", b"old")
    io.put("_lamina/hint.json", b"new")  # a plain put replaces, through a staging file too
    assert io.get("_lamina/hint.json") == b"new"
    assert sorted(os.listdir(tmp_path / "t" / "_lamina")) == ["hint.json", "versions"]


def test_a_local_put_that_fails_leaves_nothing_behind(tmp_path):
    root = tmp_path / "t"
    io = FileIO(str(root))
    io.put_new("data/a.parquet", b"a")
    (root / "data" / "sub").write_bytes(b"a file where a directory would be")
    with pytest.raises(StorageError, match="data/sub/b.parquet") as info:
        io.put_new("data/sub/b.parquet", b"b")
    assert not isinstance(info.value, AlreadyExists)
    assert sorted(os.listdir(root / "data")) == ["a.parquet", "sub"]


def test_keeping_gets_keeps_objects_under_its_prefix_within_its_budget_and_scope():
    """Within keeping_gets, objects under the prefix got from a store are served again without
    asking it (here: after they were deleted behind its back), up to the byte budget; other
    objects are always got; nothing is kept once the last scope ends."""
    io = FileIO(f"memory://{uuid.uuid4().hex}")
    for name in ("data/a", "data/b", "data/c", "meta/m"):
        io.put_new(name, name.encode().ljust(10, b"."))
    with io.keeping_gets("data", max_bytes=25):
        with io.keeping_gets("data", max_bytes=25):  # nested: one store of kept objects
            got = {n: io.get(n) for n in ("data/a", "data/b", "data/c", "meta/m")}
        for name in got:
            io.delete(name)
        assert io.get("data/a") == got["data/a"] and io.get("data/b") == got["data/b"]
        for name in ("data/c", "meta/m"):  # over the budget; outside the prefix
            with pytest.raises(NotFound):
                io.get(name)
    with pytest.raises(NotFound):
        io.get("data/a")


def test_a_fileio_pickles_with_nothing_kept(tmp_path):
    """A FileIO sent elsewhere (pickled: a Spark worker) reopens its location and carries no
    kept objects, inside a keeping_gets scope as outside."""
    import pickle

    io = FileIO(f"s3://{BUCKET}/x", {"endpoint": "http://127.0.0.1:9", "access_key_id": "k",
                                     "secret_access_key": "s", "region": "us-east-1"})
    with io.keeping_gets("data"):
        copy = pickle.loads(pickle.dumps(io))
        assert io._kept is not None and copy._kept is None and copy.uri == io.uri
    local = pickle.loads(pickle.dumps(FileIO(str(tmp_path))))
    local.put_new("a", b"x")
    assert local.get("a") == b"x"
