"""Schema evolution against a model, checked after every step of random histories.

Steps: schema changes (add top-level and nested columns, optional or required with a
default; drop; rename, also to a dropped column's name; drop and re-add of a name; move;
widen int8→…→int64, float32→float64, decimal precision, date→timestamp; make optional),
interleaved with appends (some with ``schema_mode="merge"`` bringing a new column or a wider
type), deletes and updates by predicate (deletion vectors or copy-on-write), merges,
compaction, time travel to a random earlier version, and predicates on evolved columns.

The model: columns carry a model id that a rename keeps and a drop retires (a re-added name
is a new column), rows are dicts by model id; a column added with a default gives every
existing row that value. Every committed version's rows, rendered under that version's
schema (names, order and types), are kept for time travel. After every step the table reads
back exactly the model's rows; a predicate scan returns exactly the model's filtered rows
(so pruning by statistics that predate a rename, a widening or the column itself can never
drop a matching file).

CI runs a bounded, derandomized search; for a longer one:
``LAMINA_EVO_EXAMPLES=300 LAMINA_EVO_STEPS=50 pytest tests/table/test_schema_evolution_model.py``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import lamina
from lamina.commit import flush_hints
from lamina.errors import SchemaMismatch

TOP_NAMES = [f"c{i}" for i in range(8)]
SUB_NAMES = ["x", "y", "z", "w"]
_ids = itertools.count(1)

# Each type's values: few and repeated, so predicates hit; floats exact in float32.
_VALUES: dict[str, list[Any]] = {
    "int8": [-100, -1, 0, 1, 2, 100],
    "int16": [-30000, -1, 0, 2, 300],
    "int32": [-2_000_000_000, 0, 2, 70_000],
    "int64": [-(2**62), 0, 2, 2**40],
    "float": [-1.5, 0.0, 0.5, 2.25],
    "double": [-1.5, 0.5, 2.25, 1e300],
    "string": ["", "a", "b", "zz"],
    "date32[day]": [dt.date(2020, 1, 1), dt.date(2020, 1, 2), dt.date(1999, 12, 31)],
    "timestamp[us]": [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 12, 30), dt.datetime(2021, 6, 1, 0, 0, 1)],
}
_DECIMALS = [decimal.Decimal(s) for s in ("-1.25", "0.00", "3.50", "12.34")]
_WIDER_INTS = {"int8": ["int16", "int32", "int64"], "int16": ["int32", "int64"], "int32": ["int64"]}


def _type_key(t: pa.DataType) -> str:
    return "decimal" if pa.types.is_decimal(t) else str(t)


def values_of(t: pa.DataType) -> list[Any]:
    return _DECIMALS if pa.types.is_decimal(t) else _VALUES[_type_key(t)]


def wider_types(t: pa.DataType) -> list[pa.DataType]:
    k = _type_key(t)
    if k in _WIDER_INTS:
        return [getattr(pa, n)() for n in _WIDER_INTS[k]]
    if k == "float":
        return [pa.float64()]
    if k == "decimal" and t.precision < 38:
        return [pa.decimal128(min(38, t.precision + d), t.scale) for d in (1, 10)]
    if k == "date32[day]":
        return [pa.timestamp("us")]
    return []


def widen_value(v: Any, new: pa.DataType) -> Any:
    if isinstance(v, dt.date) and not isinstance(v, dt.datetime) and pa.types.is_timestamp(new):
        return dt.datetime(v.year, v.month, v.day)
    return v


def sql_literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return repr(v) if isinstance(v, float) else str(v)


@dataclass
class Col:
    """A column of the model: ``uid`` is its identity (a rename keeps it, a re-add gets a new one)."""

    name: str
    type: pa.DataType | None  # None: a struct of ``fields``
    nullable: bool = True
    default: Any = None
    fields: list["Col"] = field(default_factory=list)
    uid: int = field(default_factory=lambda: next(_ids))

    @property
    def arrow_type(self) -> pa.DataType:
        if self.type is not None:
            return self.type
        return pa.struct([pa.field(f.name, f.arrow_type, f.nullable) for f in self.fields])

    @property
    def is_struct(self) -> bool:
        return self.type is None


def render(c: Col, v: Any) -> Any:
    if not c.is_struct or v is None:
        return v
    return {f.name: render(f, v.get(f.uid)) for f in c.fields}


class SchemaEvolution(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="lamina-evo-")
        self.next_id = 0
        self.versions: dict[int, tuple[list[tuple[str, str]], list[dict[str, Any]]]] = {}

    # -- the model -------------------------------------------------------------------------

    def render_rows(self, cols: list[Col] | None = None) -> list[dict[str, Any]]:
        cols = self.cols if cols is None else cols
        out = [{c.name: render(c, r.get(c.uid)) for c in cols} for r in self.rows]
        return sorted(out, key=lambda r: r["id"])

    def snapshot(self) -> None:
        """What the table's latest version must read (its schema and rows), kept for time travel."""
        self.t.refresh()
        self.versions[self.t.version] = (
            [(c.name, str(c.arrow_type)) for c in self.cols], self.render_rows()
        )

    def col(self, name: str) -> Col:
        return next(c for c in self.cols if c.name == name)

    def free_top_name(self, rnd: random.Random) -> str | None:
        free = [n for n in TOP_NAMES if n not in {c.name for c in self.cols}]
        return rnd.choice(free) if free else None

    def primitive_cols(self, include_id: bool = False) -> list[Col]:
        return [c for c in self.cols if not c.is_struct and (include_id or c.name != "id")]

    def structs(self) -> list[Col]:
        return [c for c in self.cols if c.is_struct]

    def value(self, c: Col, rnd: random.Random, allow_null: bool = True) -> Any:
        if c.is_struct:
            if allow_null and c.nullable and rnd.random() < 0.2:
                return None
            return {f.uid: self.value(f, rnd) for f in c.fields}
        if allow_null and c.nullable and rnd.random() < 0.25:
            return None
        return rnd.choice(values_of(c.type))

    def new_row(self, rnd: random.Random) -> dict[int, Any]:
        self.next_id += 1
        row = {c.uid: self.value(c, rnd) for c in self.cols if c.name != "id"}
        row[self.col("id").uid] = self.next_id
        return row

    def arrow_rows(self, rows: list[dict[int, Any]], cols: list[Col]) -> pa.Table:
        arrays = {}
        for c in cols:
            vals = [render(c, r.get(c.uid)) for r in rows]
            arrays[c.name] = pa.array(vals, c.arrow_type)
        return pa.table(arrays)

    # -- set-up ----------------------------------------------------------------------------

    @initialize(delete_mode=st.sampled_from(["merge-on-read", "copy-on-write"]), type_widening=st.booleans())
    def create(self, delete_mode: str, type_widening: bool) -> None:
        self.cols = [
            Col("id", pa.int64(), nullable=False),
            Col("c0", pa.int8()),
            Col("c1", pa.float32()),
            Col("st", None, fields=[Col("x", pa.int32()), Col("y", pa.string())]),
            Col("c2", pa.date32()),
            Col("c3", pa.decimal128(5, 2)),
            Col("c4", pa.string()),
        ]
        schema = pa.schema([pa.field(c.name, c.arrow_type, c.nullable) for c in self.cols])
        self.type_widening = type_widening  # whether schema_mode="merge" widens a column the data has wider
        self.t = lamina.create_table(f"{self.root}/t", schema, properties={
            "write.delete.mode": delete_mode, "schema.type-widening.enabled": str(type_widening).lower()})
        self.rows: list[dict[int, Any]] = []
        self.snapshot()

    # -- schema changes --------------------------------------------------------------------

    def _schema_change(self, apply_to_table: Any, apply_to_model: Any) -> None:
        before = self.t.version
        with self.t.update_schema() as u:
            apply_to_table(u)
        assert self.t.version == before + 1, "a schema change is one version"
        apply_to_model()
        self.snapshot()

    @rule(seed=st.integers(0, 2**16), kind=st.sampled_from(["optional", "default", "required", "struct"]),
          place=st.sampled_from(["end", "first", "after", "before"]))
    def add_column(self, seed: int, kind: str, place: str) -> None:
        rnd = random.Random(seed)
        name = self.free_top_name(rnd)
        if name is None:
            return
        if kind == "struct":
            new = Col(name, None, fields=[Col(rnd.choice(SUB_NAMES), pa.int32())])
        else:
            t = rnd.choice([pa.int8(), pa.int16(), pa.float32(), pa.string(), pa.date32(), pa.decimal128(6, 2)])
            new = Col(name, t)
            if kind in ("default", "required"):
                new.default = rnd.choice(values_of(t))
                new.nullable = kind == "default"
        ref = rnd.choice(self.cols).name
        kwargs: dict[str, Any] = {
            "end": {}, "first": {"first": True}, "after": {"after": ref}, "before": {"before": ref}
        }[place]

        def model() -> None:
            for r in self.rows:
                if new.default is not None:
                    r[new.uid] = new.default
            i = {"end": len(self.cols), "first": 0}.get(place)
            if i is None:
                i = [c.name for c in self.cols].index(ref) + (1 if place == "after" else 0)
            self.cols.insert(i, new)

        self._schema_change(
            lambda u: u.add_column(
                name, new.arrow_type, default=new.default, required=not new.nullable, **kwargs
            ),
            model,
        )

    @precondition(lambda self: self.structs())
    @rule(seed=st.integers(0, 2**16))
    def add_nested(self, seed: int) -> None:
        rnd = random.Random(seed)
        s = rnd.choice(self.structs())
        free = [n for n in SUB_NAMES if n not in {f.name for f in s.fields}]
        if not free:
            return
        new = Col(rnd.choice(free), rnd.choice([pa.int16(), pa.string()]))
        self._schema_change(lambda u: u.add_column(f"{s.name}.{new.name}", new.type), lambda: s.fields.append(new))

    @precondition(lambda self: len(self.cols) > 1)
    @rule(seed=st.integers(0, 2**16))
    def drop_column(self, seed: int) -> None:
        rnd = random.Random(seed)
        c = rnd.choice([c for c in self.cols if c.name != "id"])
        self._schema_change(lambda u: u.drop_column(c.name), lambda: self.cols.remove(c))

    @precondition(lambda self: any(len(s.fields) > 1 for s in self.structs()))
    @rule(seed=st.integers(0, 2**16))
    def drop_nested(self, seed: int) -> None:
        rnd = random.Random(seed)
        s = rnd.choice([s for s in self.structs() if len(s.fields) > 1])
        f = rnd.choice(s.fields)
        self._schema_change(lambda u: u.drop_column((s.name, f.name)), lambda: s.fields.remove(f))

    @precondition(lambda self: len(self.cols) > 1)
    @rule(seed=st.integers(0, 2**16), nested=st.booleans())
    def rename_column(self, seed: int, nested: bool) -> None:
        rnd = random.Random(seed)
        if nested and self.structs():
            s = rnd.choice(self.structs())
            f = rnd.choice(s.fields)
            free = [n for n in SUB_NAMES if n not in {g.name for g in s.fields}]
            if not free:
                return
            new_name = rnd.choice(free)
            self._schema_change(lambda u: u.rename_column(f"{s.name}.{f.name}", new_name), lambda: setattr(f, "name", new_name))
            return
        c = rnd.choice([c for c in self.cols if c.name != "id"])
        # a dropped column's name, or a name a column had before its own rename, when there is one
        new_name = self.free_top_name(rnd)
        if new_name is None:
            return
        self._schema_change(lambda u: u.rename_column(c.name, new_name), lambda: setattr(c, "name", new_name))

    @precondition(lambda self: len(self.cols) > 1)
    @rule(seed=st.integers(0, 2**16), place=st.sampled_from(["first", "after", "before"]))
    def move_column(self, seed: int, place: str) -> None:
        rnd = random.Random(seed)
        c = rnd.choice(self.cols)
        others = [o for o in self.cols if o is not c]
        ref = rnd.choice(others).name
        kwargs = {"first": {"first": True}, "after": {"after": ref}, "before": {"before": ref}}[place]

        def model() -> None:
            self.cols.remove(c)
            i = 0 if place == "first" else [o.name for o in self.cols].index(ref) + (1 if place == "after" else 0)
            self.cols.insert(i, c)

        self._schema_change(lambda u: u.move_column(c.name, **kwargs), model)

    def widenable(self) -> list[tuple[Col, str]]:
        out = [(c, c.name) for c in self.primitive_cols() if wider_types(c.type)]
        for s in self.structs():
            out += [(f, f"{s.name}.{f.name}") for f in s.fields if wider_types(f.type)]
        return out

    @precondition(lambda self: self.widenable())
    @rule(seed=st.integers(0, 2**16))
    def widen_column(self, seed: int) -> None:
        rnd = random.Random(seed)
        c, path = rnd.choice(self.widenable())
        new = rnd.choice(wider_types(c.type))

        def model() -> None:
            self._widen_values(c, new)

        self._schema_change(lambda u: u.update_column(path, new), model)

    def _widen_values(self, c: Col, new: pa.DataType) -> None:
        holder = next((s for s in self.structs() if c in s.fields), None)
        for r in self.rows:
            if holder is None:
                if c.uid in r:
                    r[c.uid] = widen_value(r[c.uid], new)
            elif r.get(holder.uid) is not None and c.uid in r[holder.uid]:
                r[holder.uid][c.uid] = widen_value(r[holder.uid][c.uid], new)
        c.default = widen_value(c.default, new) if c.default is not None else None
        c.type = new

    @precondition(lambda self: any(not c.nullable and c.name != "id" for c in self.cols))
    @rule(seed=st.integers(0, 2**16))
    def make_optional(self, seed: int) -> None:
        c = random.Random(seed).choice([c for c in self.cols if not c.nullable and c.name != "id"])
        self._schema_change(lambda u: u.update_column(c.name, nullable=True), lambda: setattr(c, "nullable", True))

    # -- data --------------------------------------------------------------------------------

    @rule(seed=st.integers(0, 2**16), n=st.integers(0, 4), omit=st.booleans())
    def append(self, seed: int, n: int, omit: bool) -> None:
        rnd = random.Random(seed)
        rows = [self.new_row(rnd) for _ in range(n)]
        cols = list(self.cols)
        if omit:
            # columns a writer leaves out: nulls, or the write default
            left_out = [c for c in cols if c.name != "id" and (c.nullable or c.default is not None) and rnd.random() < 0.4]
            for c in left_out:
                cols.remove(c)
                for r in rows:
                    r[c.uid] = c.default
            rnd.shuffle(cols)
        v = self.t.append(self.arrow_rows(rows, cols)).version
        self.rows += rows
        assert v == self.t.version
        self.snapshot()

    @rule(seed=st.integers(0, 2**16), n=st.integers(1, 3), widen=st.booleans())
    def append_merge_schema(self, seed: int, n: int, widen: bool) -> None:
        """``schema_mode="merge"``: the data brings a new column (at the end), or a wider type:
        the column is widened where the table enables type widening, else the write is refused
        (SchemaMismatch) and changes nothing."""
        rnd = random.Random(seed)
        rows = [self.new_row(rnd) for _ in range(n)]
        cols = list(self.cols)
        data = self.arrow_rows(rows, cols)
        widened: tuple[Col, pa.DataType] | None = None
        candidates = [c for c in self.primitive_cols() if wider_types(c.type)]
        if widen and candidates:
            c = rnd.choice(candidates)
            new_type = rnd.choice(wider_types(c.type))
            i = data.schema.get_field_index(c.name)
            data = data.set_column(i, pa.field(c.name, new_type), data.column(i).cast(new_type))
            widened = (c, new_type)
        new = None
        name = self.free_top_name(rnd)
        if name is not None and (not widened or rnd.random() < 0.5):
            new = Col(name, rnd.choice([pa.int32(), pa.string(), pa.float64()]))
            data = data.append_column(pa.field(name, new.type), pa.array([render(new, self.value(new, rnd)) for _ in rows], new.type))
        if widened and not self.type_widening:
            before = self.t.version
            with pytest.raises(SchemaMismatch, match=re.escape(f"column {widened[0].name!r} is {widened[1]} in the data")):
                self.t.append(data, schema_mode="merge")
            assert lamina.open_table(self.t.io.uri).version == before, "a refused write commits nothing"
            self.snapshot()
            return
        self.t.append(data, schema_mode="merge")
        self.rows += rows
        if widened:
            self._widen_values(*widened)
        if new is not None:
            self.cols.append(new)
            for r, v in zip(rows, data.column(name).to_pylist()):
                r[new.uid] = v
        self.snapshot()

    def predicate(self, rnd: random.Random) -> tuple[str, Any]:
        """A random SQL predicate on a primitive column, and the model's test of a row for it."""
        c = rnd.choice(self.primitive_cols(include_id=True))
        kind = rnd.choice(["null", "notnull", "=", "<", ">=", "!=", "in"])
        if c.name == "id":
            lit = rnd.randint(0, self.next_id + 1)
        else:
            lit = rnd.choice(values_of(c.type))
        uid = c.uid

        def get(r: dict[int, Any]) -> Any:
            return r.get(uid)

        if kind == "null":
            return f"{c.name} IS NULL", lambda r: get(r) is None
        if kind == "notnull":
            return f"{c.name} IS NOT NULL", lambda r: get(r) is not None
        if kind == "in":
            lits = [lit, rnd.choice(values_of(c.type)) if c.name != "id" else lit + 1]
            return f"{c.name} IN ({', '.join(map(sql_literal, lits))})", lambda r: get(r) is not None and get(r) in lits
        ops = {"=": lambda a, b: a == b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, "!=": lambda a, b: a != b}
        op = ops[kind]
        return f"{c.name} {kind} {sql_literal(lit)}", lambda r: get(r) is not None and op(get(r), lit)

    @rule(seed=st.integers(0, 2**16), mode=st.sampled_from([None, "merge-on-read", "copy-on-write"]))
    def delete(self, seed: int, mode: str | None) -> None:
        where, test = self.predicate(random.Random(seed))
        self.t.delete(where, mode=mode)
        self.rows = [r for r in self.rows if not test(r)]
        self.snapshot()

    @precondition(lambda self: len(self.primitive_cols()) > 0)
    @rule(seed=st.integers(0, 2**16))
    def update(self, seed: int) -> None:
        rnd = random.Random(seed)
        where, test = self.predicate(rnd)
        c = rnd.choice(self.primitive_cols())
        v = self.value(c, rnd)
        # a Python string is SQL text: quote it
        self.t.update(where, set={c.name: sql_literal(v) if isinstance(v, str) else v})
        for r in self.rows:
            if test(r):
                r[c.uid] = v
        self.snapshot()

    @rule(seed=st.integers(0, 2**16), matched=st.integers(0, 2), inserted=st.integers(0, 2))
    def merge(self, seed: int, matched: int, inserted: int) -> None:
        rnd = random.Random(seed)
        idc = self.col("id")
        targets = rnd.sample(self.rows, min(matched, len(self.rows)))
        updates = []
        for r in targets:
            u = self.new_row(rnd)
            u[idc.uid] = r[idc.uid]
            updates.append(u)
        inserts = [self.new_row(rnd) for _ in range(inserted)]
        if not updates and not inserts:
            return
        source = self.arrow_rows(updates + inserts, self.cols)
        self.t.merge(source, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
        by_id = {u[idc.uid]: u for u in updates}
        for r in self.rows:
            u = by_id.get(r[idc.uid])
            if u is not None:
                r.update({c.uid: u[c.uid] for c in self.cols})
        self.rows += inserts
        self.snapshot()

    @rule()
    def compact(self) -> None:
        self.t.maintenance.compact()
        self.snapshot()

    # -- reads -------------------------------------------------------------------------------

    @rule(seed=st.integers(0, 2**16), project=st.booleans())
    def scan_with_predicate(self, seed: int, project: bool) -> None:
        rnd = random.Random(seed)
        where, test = self.predicate(rnd)
        cols = self.cols
        if project:
            cols = rnd.sample(self.cols, rnd.randint(1, len(self.cols)))
            if self.col("id") not in cols:
                cols.append(self.col("id"))
        got = self.t.scan(where=where, columns=[c.name for c in cols]).to_arrow()
        want = sorted(({c.name: render(c, r.get(c.uid)) for c in cols} for r in self.rows if test(r)), key=lambda r: r["id"])
        assert sorted(got.to_pylist(), key=lambda r: r["id"]) == want, where

    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        v = data.draw(st.sampled_from(sorted(self.versions)))
        self.check(self.t.scan(version=v).to_arrow(), *self.versions[v], f"version {v}")

    @rule()
    def stream_batches(self) -> None:
        batches = list(self.t.scan().to_batches())
        got = pa.Table.from_batches(batches) if batches else None
        names, rows = self.versions[self.t.version]
        assert (sorted(got.to_pylist(), key=lambda r: r["id"]) if got is not None else []) == rows

    @staticmethod
    def check(got: pa.Table, names: list[tuple[str, str]], rows: list[dict[str, Any]], what: str) -> None:
        assert [(f.name, str(f.type)) for f in got.schema] == names, what
        assert sorted(got.to_pylist(), key=lambda r: r["id"]) == rows, what

    @invariant()
    def reads_the_model(self) -> None:
        if not hasattr(self, "t"):
            return
        self.check(self.t.to_arrow(), *self.versions[self.t.version], "latest")

    def teardown(self) -> None:
        flush_hints()
        shutil.rmtree(self.root, ignore_errors=True)


SchemaEvolution.TestCase.settings = settings(
    max_examples=int(os.environ.get("LAMINA_EVO_EXAMPLES", "12")),
    stateful_step_count=int(os.environ.get("LAMINA_EVO_STEPS", "25")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=tuple(Phase) if not os.environ.get("LAMINA_NO_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate),
)
test_schema_evolution_matches_the_model = pytest.mark.xdist_group("evo-model")(SchemaEvolution.TestCase)
