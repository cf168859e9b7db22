"""Version expiry (lamina.maintenance.expire through ``Table.expire_versions``).

Checked against oracles that do not ask expiry what it should have done:

- which versions go: computed here from the history's timestamps (docs/format.md, "Expiry
  and garbage collection": ``v`` goes iff its successor was committed at or before the
  cutoff, it is not among the ``retain_last`` newest, and its successor is ``reader_grace``
  old);
- which files go: exactly the data, deletion-vector and manifest files no surviving version
  and no tag references, as the public ``$files``/``$manifests`` system tables list them;
- what survives reads: the rows each retained version and tag returned before expiry, which
  must also be a plain Python model's rows;
- slots: an expired version is covered by a slot record naming its commit before anything
  else changes; its slot file is deleted only once the record is older than the slot
  retention (docs/format.md, "The commit guarantee").

Time is a fake clock (``time.time`` patched): versions get chosen timestamps, and ages are
exact without sleeping.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import example, HealthCheck, given, settings
from hypothesis import strategies as st

import lamina
from lamina.commit import flush_hints
from lamina.errors import InvalidArgument, VersionNotFound
from lamina.maintenance import fsck
from lamina.spec.layout import version_path
from support.files import ids_of, referenced, table_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("grp", pa.string())])
NO_GRACE = timedelta(0)
MINUTE = 60_000
DAY = 86_400_000
T0 = 1_800_000_000_000  # the fake clock's start, epoch ms (2027-01-15)
# Small manifests, so a few commits already make leaves, rewrites and merges.
TREE = {"manifest.inline-max-files": "2", "manifest.leaf-target-files": "3", "manifest.merge-min-leaves": "3"}


class Clock:
    """``time.time`` for the test: epoch ms it is set to, exactly (half a ms added so that
    ``int(time.time() * 1000)`` never rounds down below it)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return (self.ms + 0.5) / 1000

    def advance(self, ms: int) -> int:
        self.ms += ms
        return self.ms


@pytest.fixture
def clock(monkeypatch):
    c = Clock(T0)
    monkeypatch.setattr(time, "time", c)
    yield c
    flush_hints()


def batch(ids, grp: str = "a") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "grp": [grp] * len(ids)}, schema=SCHEMA)


def gc_files(root: str) -> set[str]:
    """The files expiry may delete: data files, deletion vectors, manifests."""
    return {p for p in table_files(root) if p.startswith(("data/", "_lamina/manifests/"))}


def expected_expired(history: list[dict], retain_last: int | None, limit_ms: int) -> list[int]:
    """The rule of docs/format.md: oldest first, while the version is not among the
    ``retain_last`` newest and its successor was committed at or before ``limit_ms``."""
    versions = sorted(h["version"] for h in history)
    ts = {h["version"]: h["timestamp_ms"] for h in history}
    out = []
    for i, v in enumerate(versions[: max(0, len(versions) - (retain_last or 1))]):
        if ts[versions[i + 1]] > limit_ms:
            break
        out.append(v)
    return out


def reads(t: lamina.Table) -> tuple[dict[int, list[int]], dict[str, list[int]]]:
    """Rows of every version and every tag."""
    versions = {h["version"]: ids_of(t.scan(version=h["version"]).to_arrow()) for h in t.history()}
    tags = {tg.name: ids_of(t.scan(version=tg.name).to_arrow()) for tg in t.tags.list()}
    return versions, tags


def check_after_expiry(t: lamina.Table, rep, before_versions, before_tags, commit_ids) -> None:
    """What must hold after any expiry: expired versions are unreadable, each under a slot
    record naming its commit, every other version and every tag reads as before, and the
    files left are exactly those still referenced."""
    t = lamina.open_table(t.uri)
    chunk = lamina.TableProperties.VERSION_SLOT_CHUNK_SIZE.get(t.metadata.properties)
    for v in rep.expired_versions:
        with pytest.raises(VersionNotFound):
            t.scan(version=v)
        record = t.log.slot_record(v, chunk)
        assert record is not None and record.names(v, commit_ids[v]), (v, record)
        assert not record.names(v, commit_ids[v][:15] + ("0" if commit_ids[v][15] != "0" else "1") + commit_ids[v][16:])
    survivors = {h["version"] for h in t.history()}
    assert survivors == set(before_versions) - set(rep.expired_versions)
    for v in survivors:
        assert ids_of(t.scan(version=v).to_arrow()) == before_versions[v], f"version {v} changed"
    for name, rows in before_tags.items():
        assert ids_of(t.scan(version=name).to_arrow()) == rows, f"tag {name} changed"
    left = gc_files(t.uri)
    needed = referenced(t)
    assert needed <= left, f"expiry deleted files still referenced: {sorted(needed - left)}"
    assert left == needed, f"expiry left files nothing references: {sorted(left - needed)}"
    report = fsck(t)
    assert report.ok and report.unreferenced == [], report


# -- the model: random histories, then one expiry -------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3), st.sampled_from("ab")),
        st.tuples(st.just("overwrite"), st.sampled_from("ab")),
        st.tuples(st.just("delete"), st.integers(0, 2)),
        st.tuples(st.just("rollback"), st.integers(0, 50)),
        st.tuples(st.just("tag")),
        st.tuples(st.just("compact")),
    ),
    min_size=1,
    max_size=7,
)


def run_history(t: lamina.Table, steps, clock: Clock) -> dict[int, list[int]]:
    """Apply ``steps`` (one commit each, a minute apart); returns the model's rows per version."""
    rows: list[tuple[int, str]] = []
    model: dict[int, list[tuple[int, str]]] = {0: []}
    next_id = 0
    for step in steps:
        clock.advance(MINUTE)
        kind = step[0]
        if kind == "append":
            new = [(next_id + i, step[2]) for i in range(step[1])]
            next_id += step[1]
            t.append(batch([i for i, _ in new], step[2]))
            rows += new
        elif kind == "overwrite":
            t.overwrite(batch([next_id], step[1]), where=f"grp = '{step[1]}'")
            rows = [r for r in rows if r[1] != step[1]] + [(next_id, step[1])]
            next_id += 1
        elif kind == "delete":  # merge-on-read: deletion vectors on the files holding them
            doomed = [i for i, _ in rows if i % 3 == step[1]]
            if not doomed:
                continue
            t.delete(f"id IN ({', '.join(map(str, doomed))})")
            rows = [r for r in rows if r[0] % 3 != step[1]]
        elif kind == "rollback":
            target = sorted(model)[step[1] % len(model)]
            t.rollback(target)
            rows = list(model[target])
        elif kind == "compact":  # same rows in fewer files; deletion vectors applied
            if t.maintenance.compact().version is None:
                continue
        else:
            t.tags.create(f"tag{t.version}-{len(t.tags.list())}")
            continue
        model[t.version] = sorted(rows)
    return {v: [i for i, _ in r] for v, r in model.items()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=ops, retain=st.integers(1, 8), by_time=st.booleans(), pick=st.integers(0, 50), edge=st.sampled_from([-1, 0]))
# found by the property: a deletion vector replaced by a version that removed no file was
# never freed (the version's summary said it removed nothing, so its root was not read)
@example(steps=[("append", 3, "a"), ("delete", 0), ("delete", 1)], retain=1, by_time=False, pick=0, edge=-1)
def test_expiry_keeps_exactly_what_retained_versions_and_tags_need(tmp_path_factory, clock, steps, retain, by_time, pick, edge):
    t = lamina.create_table(str(tmp_path_factory.mktemp("exp") / "t"), SCHEMA, properties=TREE)
    model = run_history(t, steps, clock)
    clock.advance(MINUTE)
    history = t.history()
    before_versions, before_tags = reads(t)
    assert before_versions == model  # the reads the oracle is taken from are the model's
    commit_ids = {h["version"]: h["commit_id"] for h in history}
    if by_time:  # a cutoff at a version's commit time (edge 0) or just before it (-1)
        stamps = sorted(h["timestamp_ms"] for h in history)
        cutoff = stamps[pick % len(stamps)] + edge
        kwargs = {"older_than": cutoff}
        want = expected_expired(history, None, cutoff)
    else:
        kwargs = {"retain_last": retain}
        want = expected_expired(history, retain, clock.ms)
    files_before = table_files(t.uri)
    dry = t.maintenance.expire_versions(reader_grace=NO_GRACE, dry_run=True, **kwargs)
    assert table_files(t.uri) == files_before, "a dry run changed the table"
    rep = t.maintenance.expire_versions(reader_grace=NO_GRACE, **kwargs)
    assert rep.expired_versions == want == dry.expired_versions
    deleted = set(files_before) - set(table_files(t.uri))
    assert set(rep.deleted_files) | set(rep.deleted_manifests) == {p for p in deleted if not p.startswith("_lamina/versions/")}
    assert (sorted(dry.deleted_files), sorted(dry.deleted_manifests)) == (sorted(rep.deleted_files), sorted(rep.deleted_manifests))
    assert rep.deleted_bytes == dry.deleted_bytes == sum(len(files_before[p]) for p in rep.deleted_files + rep.deleted_manifests)
    check_after_expiry(t, rep, before_versions, before_tags, commit_ids)


def test_dry_run_reports_what_the_real_run_deletes_after_a_rollback_readded_files(clock, tmp_path):
    """The smallest history the model found: a rollback re-adds a file (the table's
    ``last_readd_version`` is set, so expiry decides by the full reachability walk). The dry
    run must report the file the real run deletes: B, which only version 2 referenced."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(batch([0]))  # v1: file A
    t.overwrite(batch([1]))  # v2: removes A, adds B
    only_v2 = set(t.inspect.files().column("path").to_pylist())
    t.rollback(1)  # v3: re-adds A, removes B
    clock.advance(MINUTE)
    before = table_files(t.uri)
    dry = t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE, dry_run=True)
    assert table_files(t.uri) == before
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE)
    assert rep.expired_versions == dry.expired_versions == [0, 1, 2]
    assert set(rep.deleted_files) == only_v2  # B: nothing retained references it
    assert sorted(dry.deleted_files) == sorted(rep.deleted_files)
    assert dry.deleted_bytes == rep.deleted_bytes and dry.kept_for_tags == rep.kept_for_tags
    assert ids_of(lamina.open_table(t.uri).to_arrow()) == [0]


# -- which versions go ----------------------------------------------------------------------


def ten_minutes_apart(clock: Clock, tmp_path, n: int = 5, properties: dict | None = None) -> lamina.Table:
    """Version 0 at T0, version i at T0 + 10 i minutes (i = 1..n), each appending row i."""
    clock.ms = T0
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=properties)
    for i in range(1, n + 1):
        clock.ms = T0 + 10 * i * MINUTE
        t.append(batch([i]))
    return t


def test_older_than_expires_a_version_iff_its_successor_was_committed_by_the_cutoff(clock, tmp_path):
    t = ten_minutes_apart(clock, tmp_path)
    clock.ms = T0 + DAY
    # version 2's successor (3) was committed at T0+30min: a cutoff a millisecond earlier keeps 2
    assert t.maintenance.expire_versions(older_than=T0 + 30 * MINUTE - 1, reader_grace=NO_GRACE).expired_versions == [0, 1]
    assert t.log.list_versions() == [2, 3, 4, 5]
    # ... and one at that instant expires it; the cutoff as a datetime or ISO text means the same
    cutoff = datetime.fromtimestamp((T0 + 30 * MINUTE) / 1000, tz=timezone.utc)
    assert t.maintenance.expire_versions(older_than=cutoff.isoformat(), reader_grace=NO_GRACE, dry_run=True).expired_versions == [2]
    assert t.maintenance.expire_versions(older_than=cutoff, reader_grace=NO_GRACE).expired_versions == [2]
    # time travel to any instant at or after the cutoff still works
    assert ids_of(t.scan(timestamp=T0 + 30 * MINUTE).to_arrow()) == [1, 2, 3]
    assert ids_of(t.scan(timestamp=T0 + 35 * MINUTE).to_arrow()) == [1, 2, 3]
    with pytest.raises(VersionNotFound):
        t.scan(timestamp=T0 + 30 * MINUTE - 1)


def test_older_than_as_an_age_is_measured_from_now(clock, tmp_path):
    t = ten_minutes_apart(clock, tmp_path)
    clock.ms = T0 + 75 * MINUTE  # an age of 35 minutes: the cutoff is T0 + 40 min
    rep = t.maintenance.expire_versions(older_than=timedelta(minutes=35), reader_grace=NO_GRACE)
    assert rep.expired_versions == [0, 1, 2, 3]  # version 4 (successor at 50 min) stays


def test_retain_last_keeps_that_many_newest_versions_whatever_their_age(clock, tmp_path):
    t = ten_minutes_apart(clock, tmp_path)
    clock.ms = T0 + 30 * DAY
    assert t.maintenance.expire_versions(retain_last=4, reader_grace=NO_GRACE).expired_versions == [0, 1]
    assert t.log.list_versions() == [2, 3, 4, 5]
    # retain_last with an older_than: a version goes only if both let it
    assert t.maintenance.expire_versions(retain_last=1, older_than=T0 + 40 * MINUTE, reader_grace=NO_GRACE).expired_versions == [2, 3]
    assert t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE).expired_versions == [4]
    assert t.log.list_versions() == [5]
    assert t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE).expired_versions == []  # the latest always stays
    assert ids_of(t.to_arrow()) == [1, 2, 3, 4, 5]


def test_neither_bound_given_expires_versions_superseded_five_days_ago(clock, tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for d in range(1, 4):  # versions 1..3 committed 1, 2 and 3 days after version 0
        clock.ms = T0 + d * DAY
        t.append(batch([d]))
    clock.ms = T0 + 7 * DAY + DAY // 2  # five days ago is T0 + 2.5 days
    assert t.maintenance.expire_versions(reader_grace=NO_GRACE, dry_run=True).expired_versions == [0, 1]
    clock.ms = T0 + 8 * DAY + DAY // 2  # ... now T0 + 3.5 days
    assert t.maintenance.expire_versions(reader_grace=NO_GRACE).expired_versions == [0, 1, 2]


def test_reader_grace_holds_versions_superseded_too_recently(clock, tmp_path):
    t = ten_minutes_apart(clock, tmp_path)
    clock.ms = T0 + 60 * MINUTE  # successors at 10..50 min; a 25-minute grace reaches back to 35 min
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=timedelta(minutes=25), dry_run=True)
    assert rep.expired_versions == [0, 1, 2] and rep.held_by_reader_grace
    # the same from the table property, and from the default of one hour (holds everything)
    graced = ten_minutes_apart(clock, tmp_path / "p", properties={"expire.reader-grace-ms": str(25 * MINUTE)})
    clock.ms = T0 + 60 * MINUTE
    rep = graced.maintenance.expire_versions(retain_last=1)
    assert rep.expired_versions == [0, 1, 2] and rep.held_by_reader_grace
    assert graced.log.list_versions() == [3, 4, 5]
    rep = t.maintenance.expire_versions(retain_last=1)
    assert rep.expired_versions == [] and rep.held_by_reader_grace
    # with an older_than, the grace is only reported when it, not the cutoff, held a version
    rep = t.maintenance.expire_versions(older_than=T0 + 50 * MINUTE, reader_grace=timedelta(minutes=25), dry_run=True)
    assert rep.expired_versions == [0, 1, 2] and rep.held_by_reader_grace
    rep = t.maintenance.expire_versions(older_than=T0 + 35 * MINUTE, reader_grace=NO_GRACE, dry_run=True)
    assert rep.expired_versions == [0, 1, 2] and not rep.held_by_reader_grace
    clock.ms = T0 + 110 * MINUTE  # an hour after the last commit: the default grace lets them all go
    assert t.maintenance.expire_versions(retain_last=1).expired_versions == [0, 1, 2, 3, 4]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=st.lists(st.integers(1, 120), min_size=1, max_size=7), retain=st.one_of(st.none(), st.integers(1, 9)),
       cutoff=st.one_of(st.none(), st.integers(0, 900)), grace=st.integers(0, 300), later=st.integers(0, 300))
def test_the_report_says_why_each_kept_version_was_kept(tmp_path_factory, clock, gaps, retain, cutoff, grace, later):
    """Each version before the latest that does not expire is counted once, by the first rule
    that keeps it (the model: retain_last's newest, then a successor younger than the cutoff,
    then one younger than the reader grace), and the report names the rules it applied."""
    clock.ms = T0
    t = lamina.create_table(str(tmp_path_factory.mktemp("why") / "t"), SCHEMA)
    times = [T0]
    for i, gap in enumerate(gaps):
        clock.ms = times[-1] + gap * MINUTE
        times.append(clock.ms)
        t.append(batch([i]))
    clock.ms = times[-1] + later * MINUTE
    older_than = None if cutoff is None else T0 + cutoff * MINUTE
    if older_than is None and retain is None:
        older_than = clock.ms - 5 * DAY  # neither given: five days
    rep = t.maintenance.expire_versions(older_than=None if cutoff is None else older_than, retain_last=retain,
                            reader_grace=timedelta(minutes=grace), dry_run=True)
    why = {"retain_last": 0, "age": 0, "grace": 0}
    expired = []
    n = len(times)
    for v in range(n - 1):  # versions 0 .. n-2; n-1 is the latest
        if retain is not None and v >= n - retain:
            why["retain_last"] += 1
        elif older_than is not None and times[v + 1] > older_than:
            why["age"] += 1
        elif times[v + 1] > clock.ms - grace * MINUTE:
            why["grace"] += 1
        else:
            expired.append(v)
    assert rep.expired_versions == expired
    assert (rep.kept_by_retain_last, rep.kept_by_age, rep.kept_by_reader_grace) == (why["retain_last"], why["age"], why["grace"])
    assert rep.held_by_reader_grace == (why["grace"] > 0)
    assert (rep.cutoff_ms, rep.reader_grace_ms, rep.retain_last) == (older_than, grace * MINUTE, retain)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"retain_last": 0}, {"retain_last": -1}, {"retain_last": True}, {"retain_last": 1.5},
        {"older_than": timedelta(days=-1)}, {"older_than": float("nan")}, {"older_than": "yesterday"},
        {"older_than": [1]}, {"reader_grace": timedelta(hours=-1)}, {"reader_grace": "soon"},
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(clock, tmp_path, kwargs):
    t = ten_minutes_apart(clock, tmp_path, n=2)
    clock.ms = T0 + DAY
    before = table_files(t.uri)
    with pytest.raises(InvalidArgument):
        t.maintenance.expire_versions(**{"reader_grace": NO_GRACE, **kwargs})
    assert table_files(t.uri) == before


# -- what stays readable ----------------------------------------------------------------------


def test_tags_keep_their_versions_readable_and_their_files(clock, tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=TREE)
    t.append(batch(range(0, 4)))  # v1
    t.tags.create("first")
    t.append(batch(range(4, 6), "b"))  # v2
    t.delete("id = 1")  # v3: a deletion vector on v1's file
    t.tags.create("deleted")
    only_deleted = set(t.inspect.files().column("dv_path").to_pylist()) - {None}  # v3's deletion vector...
    only_deleted |= set(t.inspect.files(version=2).column("path").to_pylist()) - set(t.inspect.files(version=1).column("path").to_pylist())
    t.overwrite(batch([100]))  # v4: every earlier file removed
    t.append(batch([101]))  # v5
    commit_ids = {h["version"]: h["commit_id"] for h in t.history()}
    before_versions, before_tags = reads(t)
    assert before_tags == {"first": [0, 1, 2, 3], "deleted": [0, 2, 3, 4, 5]}
    clock.advance(DAY)
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE)
    assert rep.expired_versions == [0, 1, 2, 3, 4]
    assert rep.kept_for_tags == 2  # v1's and v2's files: v4 removed them, tags hold them
    check_after_expiry(t, rep, before_versions, before_tags, commit_ids)
    # ... and v2's file: of the surviving points only "deleted" holds them, so they go with it
    freed = t.tags.delete("deleted")
    assert set(freed.deleted_files) == only_deleted and len(only_deleted) == 2
    assert ids_of(t.scan(version="first").to_arrow()) == [0, 1, 2, 3]
    assert gc_files(t.uri) == referenced(lamina.open_table(t.uri))


@pytest.mark.parametrize("readd", [False, True], ids=["plain", "after-a-rollback-readd"])
def test_deleting_a_tag_frees_what_only_it_held_and_its_dry_run_says_so(clock, tmp_path, readd):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(batch([0]))  # v1: file A
    t.overwrite(batch([1]))  # v2: file B replaces A
    only_tag = set(t.inspect.files().column("path").to_pylist())
    t.tags.create("two")
    if readd:
        t.rollback(1)  # v3: A again (re-added), B removed
    else:
        t.overwrite(batch([0]))  # v3: a new file replaces B
    clock.advance(MINUTE)
    t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE)  # B is held by the tag alone
    before = table_files(t.uri)
    dry = t.tags.delete("two", dry_run=True)
    assert table_files(t.uri) == before and t.tags.get("two").tagged_version == 2
    rep = t.tags.delete("two")
    assert set(rep.deleted_files) == only_tag
    assert (sorted(dry.deleted_files), sorted(dry.deleted_manifests), dry.deleted_bytes) == (
        sorted(rep.deleted_files), sorted(rep.deleted_manifests), rep.deleted_bytes)
    assert set(before) - set(table_files(t.uri)) == set(rep.deleted_files) | set(rep.deleted_manifests) | {
        "_lamina/tags/two.json"}
    assert gc_files(t.uri) == referenced(lamina.open_table(t.uri))


def dry_then_real_expiry(t: lamina.Table, **kwargs):
    """A dry run, then the real run: the dry run changed nothing and reported what the real
    run deleted, file for file and byte for byte. Returns the real run's report."""
    before = table_files(t.uri)
    dry = t.maintenance.expire_versions(reader_grace=NO_GRACE, dry_run=True, **kwargs)
    assert table_files(t.uri) == before, "a dry run changed the table"
    rep = t.maintenance.expire_versions(reader_grace=NO_GRACE, **kwargs)
    assert (dry.expired_tags, dry.expired_versions) == (rep.expired_tags, rep.expired_versions)
    assert (sorted(dry.deleted_files), sorted(dry.deleted_manifests), dry.deleted_bytes) == (
        sorted(rep.deleted_files), sorted(rep.deleted_manifests), rep.deleted_bytes)
    return rep


@pytest.mark.parametrize("readd", [False, True], ids=["plain", "after-a-rollback-readd"])
def test_dry_run_counts_tags_past_their_expiry_as_deleted(clock, tmp_path, readd):
    """Expiry deletes tags past ``expires_at`` first; its dry run deletes none, yet must
    report what the real run frees without them: the files only they held, whether their
    version expires in the same run or went earlier. Two tags on one version, so neither may
    count the other as keeping it."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(batch([0]))  # v1: file A
    t.overwrite(batch([1]))  # v2: file B replaces A
    only_tagged = set(t.inspect.files().column("path").to_pylist())
    for name in ("two", "also-two"):
        t.tags.create(name, expires_at=timedelta(minutes=5))
    if readd:
        t.rollback(1)  # v3: A again (re-added), B removed
    else:
        t.overwrite(batch([0]))  # v3: a new file replaces B
    clock.advance(10 * MINUTE)
    # the tags' version expires in the same run as the tags
    rep = dry_then_real_expiry(t, retain_last=1)
    assert rep.expired_tags == ["also-two", "two"] and only_tagged <= set(rep.deleted_files)
    # the tags' version went in an earlier run, the tags held its files
    t.overwrite(batch([2]))  # v4: file D
    only_tagged = set(t.inspect.files().column("path").to_pylist())
    for name in ("four", "also-four"):
        t.tags.create(name, expires_at=timedelta(minutes=5))
    t.overwrite(batch([3]))  # v5: D removed
    clock.advance(MINUTE)
    assert dry_then_real_expiry(t, retain_last=1).expired_tags == []  # the tags hold D
    clock.advance(10 * MINUTE)
    rep = dry_then_real_expiry(t, retain_last=1)
    assert rep.expired_tags == ["also-four", "four"] and set(rep.deleted_files) == only_tagged
    assert gc_files(t.uri) == referenced(lamina.open_table(t.uri))


def test_a_file_live_in_the_latest_version_is_never_deleted(clock, tmp_path):
    """The oldest file of the table stays live through every later commit (appends, a
    rollback that re-adds, a delete on another file) and every expiry."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=TREE)
    t.append(batch([0], "keep"))  # v1: the file that stays live
    oldest = t.inspect.files().column("path").to_pylist()
    for i in range(1, 6):
        clock.advance(MINUTE)
        t.append(batch([i], "churn"))
        if i % 2 == 0:
            t.overwrite(batch([100 + i], "churn"), where="grp = 'churn'")
        clock.advance(MINUTE)
        t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE)
    v = t.version
    t.delete("id >= 100")
    t.rollback(v)  # re-adds the file the delete dropped
    clock.advance(MINUTE)
    t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE)
    for p in oldest:
        assert os.path.exists(os.path.join(t.uri, p))
    assert ids_of(lamina.open_table(t.uri).to_arrow()) == [0, 5, 104]
    assert gc_files(t.uri) == referenced(lamina.open_table(t.uri))


# -- slot records and freed slots -------------------------------------------------------------


def test_expired_slots_are_recorded_then_freed_after_the_retention(clock, tmp_path):
    props = {"version.slot-chunk-size": "4", "expire.slot-retention-ms": str(60 * MINUTE)}
    t = ten_minutes_apart(clock, tmp_path, n=10, properties=props)
    commit_ids = {h["version"]: h["commit_id"] for h in t.history()}
    clock.ms = T0 + DAY
    before = table_files(t.uri)
    rep = t.maintenance.expire_versions(retain_last=2, reader_grace=NO_GRACE)
    assert rep.expired_versions == list(range(9)) and rep.freed_slots == 0  # the records are too young
    # one record per chunk the expired run spans (chunk 8-11 holds version 9 too), each naming
    # the commit (its short id) every slot held, written before anything was deleted
    records = t.log.slot_records()
    assert [(r.first, r.last, r.at_ms) for r in records] == [(0, 3, T0 + DAY), (4, 7, T0 + DAY), (8, 8, T0 + DAY)]
    for r in records:
        record = json.loads(t.io.get(r.path))
        assert record["commit_ids"] == [commit_ids[v][:16] for v in range(r.first, r.last + 1)]
        assert (record["first_version"], record["last_version"], record["expired_at_ms"]) == (r.first, r.last, T0 + DAY)
    for v in range(9):
        assert t.io.exists(version_path(v))  # the expired version's file keeps its slot taken
        with pytest.raises(VersionNotFound):
            t.scan(version=v)
    assert set(table_files(t.uri)) - set(before) == {r.path for r in records}
    clock.advance(60 * MINUTE - 1)  # one millisecond short of the retention
    assert t.maintenance.expire_versions(retain_last=2, reader_grace=NO_GRACE).freed_slots == 0
    clock.advance(1)
    before = table_files(t.uri)
    dry = t.maintenance.expire_versions(retain_last=2, reader_grace=NO_GRACE, dry_run=True)
    assert dry.freed_slots == 9 and table_files(t.uri) == before
    rep = t.maintenance.expire_versions(retain_last=2, reader_grace=NO_GRACE)
    assert rep.expired_versions == [] and rep.freed_slots == 9
    assert set(before) - set(table_files(t.uri)) == {version_path(v) for v in range(9)}
    for v in (0, 5, 8):
        with pytest.raises(VersionNotFound):
            t.scan(version=v)
    fresh = lamina.open_table(t.uri)
    assert fresh.version == 10 and ids_of(fresh.to_arrow()) == list(range(1, 11))
    assert fresh.log.list_versions() == [9, 10]
    report = fsck(fresh)
    assert report.ok and report.unreferenced == [], report
    # the next commit lands after the freed chunks, not in them
    fresh.append(batch([11]))
    assert fresh.version == 11 and ids_of(lamina.open_table(t.uri).to_arrow()) == list(range(1, 12))


def test_a_read_of_a_version_expired_after_it_began_says_so_instead_of_corruption(clock, tmp_path):
    """A notebook keeps a scan, a stream or a table handle of version N, then expiry removes
    N and its files: reading it is a VersionNotFound saying so, not CorruptMetadata sending
    the user to `lamina fsck` (which finds nothing wrong). A file missing from a version that
    is still kept stays MissingFile, a CorruptMetadata."""
    from lamina.errors import CorruptMetadata, MissingFile

    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, properties=TREE)
    for i in range(3):
        t.append(batch(range(10 * i, 10 * i + 10)))
    t.delete("id = 3")  # a deletion vector: the read of files with DVs takes its own path
    planned = t.scan(where="id < 25")
    assert planned.count() == 24  # planned and read once
    unplanned, streamed, handle = t.scan(), t.scan(columns=["id"]), lamina.open_table(t.uri)
    pinned_version = t.version
    t.overwrite(batch([100]))  # every earlier file removed
    clock.advance(DAY)
    assert t.maintenance.expire_versions(retain_last=1, reader_grace=NO_GRACE).expired_versions == list(range(pinned_version + 1))
    reads = {
        "planned scan": planned.to_arrow, "unplanned scan": unplanned.to_arrow,
        "stream": lambda: streamed.to_reader().read_all(), "table handle": handle.to_arrow,
        "pandas": unplanned.to_pandas,
    }
    for what, read in reads.items():
        with pytest.raises(VersionNotFound, match=f"version {pinned_version} of .* is no longer kept") as e:
            read()
        assert "reader_grace" in str(e.value) and not isinstance(e.value, CorruptMetadata), what
    assert ids_of(t.to_arrow()) == [100]
    # A file gone from the version that is kept: the table's fault, said as before.
    os.remove(os.path.join(t.uri, t.inspect.files().column("path")[0].as_py()))
    with pytest.raises(MissingFile, match=r"is missing .*; run `lamina fsck`"):
        lamina.open_table(t.uri).to_arrow()
