"""The layering of lamina's packages, read from the code (ast): every import points down, and
no module reaches into another package's private names.

The layers, bottom to top (README.md, "Layers", states the same; docs/architecture.md says why):
a package may import its own modules and the packages below it, never one above or beside
it, so there is no circle between packages.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "lamina"

LAYERS = [
    ("errors",),
    ("timeutil",),
    ("io",),
    ("spec",),
    ("expr",),
    ("manifest",),
    ("data",),
    ("commit",),
    ("operations",),
    ("iceberg",),  # the Iceberg view: derived metadata of the versions (docs/iceberg.md)
    ("maintenance",),
    ("table",),
    ("catalog",),
    ("convert",),  # other formats' tables adopted in place: builds tables
    ("__init__",),  # the facade: lamina.open_table, lamina.load_catalog, ...
    ("spark", "duckdb", "polars"),  # engines: each uses the public API, none another
    ("ui", "rest"),  # servers: the read-only explorer (`lamina ui`), the Iceberg REST catalog (`lamina serve-iceberg`)
    ("cli",),
    ("demo",),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def _package(module: str) -> str:
    """``lamina.commit.log`` -> ``commit``; ``lamina`` (the facade) -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out[name] = ast.parse(path.read_text(), str(path))
    return out


MODULES = _modules()


def _imports(module: str, tree: ast.Module) -> list[tuple[int, str, list[str]]]:
    """(line, imported lamina module, names taken) for every import, wherever it is (in
    functions and TYPE_CHECKING blocks too: a lazy import is still a dependency)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "lamina"]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative: resolve against this module's package
                pkg = module.split(".") if module in ("lamina",) or _is_package(module) else module.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + [node.module])
            if base.split(".")[0] == "lamina":
                out.append((node.lineno, base, [a.name for a in node.names]))
    return out


def _is_package(module: str) -> bool:
    return (ROOT.parent / module.replace(".", "/") / "__init__.py").exists()


def test_every_package_has_a_layer():
    packages = {_package(m) for m in MODULES}
    assert packages <= set(RANK), f"packages without a layer in LAYERS: {sorted(packages - set(RANK))}"


def test_imports_point_down():
    bad = []
    for module, tree in MODULES.items():
        mine = _package(module)
        for line, target, _ in _imports(module, tree):
            theirs = _package(target)
            if theirs != mine and RANK[theirs] >= RANK[mine]:
                bad.append(f"{module}:{line} imports {target} ({theirs} is not below {mine})")
    assert not bad, "imports that point up or sideways:\n" + "\n".join(bad)


def test_no_private_name_is_imported_across_packages():
    bad = []
    for module, tree in MODULES.items():
        for line, target, names in _imports(module, tree):
            if _package(target) == _package(module):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private += [p for p in target.split(".") if p.startswith("_") and not p.startswith("__")]
            if private:
                bad.append(f"{module}:{line} takes {private} from {target}")
    assert not bad, "private names imported across packages:\n" + "\n".join(bad)


def _private_names_defined(package: str) -> set[str]:
    """Every ``_name`` a package defines: functions, classes, assignments, attributes set on
    any object (``self._x = ...``), and keyword parameters."""
    names: set[str] = set()
    for module, tree in MODULES.items():
        if _package(module) != package:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


# Private attributes of libraries' objects that are their documented API.
LIBRARY_API = {"_replace", "_asdict", "_fields", "_make", "_getframe"}
# Polars' dataset-scan protocol (what its own scan_delta/scan_iceberg use; polars is pinned):
# lamina.polars builds a pyarrow-backed scan inside it the way scan_delta does.
LIBRARY_API |= {"_scan_pyarrow_dataset_impl", "_scan_python_function"}
# PySpark's handle on a classic DataFrame's JVM Dataset (pyspark is pinned): the one way to see
# its optimized plan, which lamina.spark._collect reads to tell a bare Parquet scan (and it
# falls back to Spark where the handle is absent, as under Spark Connect).
LIBRARY_API |= {"_jdf"}
# A classic session's JVM gateway and JVM session (likewise): Hadoop's configuration, where
# lamina.spark.s3a sets a bucket's S3A keys, and the file sink Spark's native writer commits
# through (lamina.spark._native_write); under Spark Connect there is none, and the Python data
# source is used.
LIBRARY_API |= {"_jvm", "_jsparkSession"}


def test_no_private_member_is_reached_from_another_package():
    """``obj._name`` outside ``self``/``cls`` must name something the accessing package itself
    defines: a private member of a class of another package (``table._mschema_of`` from
    spark) is that package's business, not an API."""
    own = {p: _private_names_defined(p) for p in RANK}
    bad = []
    for module, tree in MODULES.items():
        mine = _package(module)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            if not name.startswith("_") or name.startswith("__") or name in LIBRARY_API:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) and node.value.func.id == "super":
                continue
            if name not in own[mine]:
                bad.append(f"{module}:{node.lineno} reaches .{name}")
    assert not bad, "private members reached from another package:\n" + "\n".join(bad)


@pytest.mark.parametrize("layer", [p for names in LAYERS for p in names if p not in ("__init__",)])
def test_layer_exists(layer):
    """Every layer named is a module or package of lamina (the list stays true as code moves)."""
    assert (ROOT / layer).is_dir() or (ROOT / f"{layer}.py").exists(), layer


# What each engine, server and the CLI may import of lamina, beyond its own package: an
# allow-list (the README's table, "Where things are", states the same and is checked against
# it below). "lamina" is the facade.
ENGINE_IMPORTS = {
    "spark": {"lamina", "table", "operations", "commit", "data", "manifest", "expr", "spec", "io", "errors"},
    "duckdb": {"lamina", "catalog", "table", "data", "expr", "spec", "io", "errors"},
    "polars": {"lamina", "table", "data", "expr", "spec", "io"},
    "ui": {"lamina", "catalog", "table", "maintenance", "operations", "commit", "data", "manifest", "spec", "errors"},
    "rest": {"catalog", "iceberg", "errors"},
    "cli": {"lamina", "catalog", "table", "maintenance", "data", "spec", "duckdb", "ui", "rest", "errors", "timeutil"},
}


def _named(package: str) -> str:
    return "lamina" if package == "__init__" else package


def test_engines_import_only_what_their_allow_list_names():
    bad = []
    for module, tree in MODULES.items():
        mine = _package(module)
        if mine not in ENGINE_IMPORTS:
            continue
        for line, target, _ in _imports(module, tree):
            theirs = _named(_package(target))
            if theirs != mine and theirs not in ENGINE_IMPORTS[mine]:
                bad.append(f"{module}:{line} imports {target} (not in ENGINE_IMPORTS[{mine!r}])")
    assert not bad, "imports outside an engine's allow-list:\n" + "\n".join(bad)


def test_the_readme_table_states_each_engines_allow_list():
    """The README's row of each engine package lists, in its last column, exactly the
    packages ENGINE_IMPORTS allows it (as `lamina` for the facade and `lamina.<package>`)."""
    rows = {}
    for line in (ROOT.parent / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`lamina."):
            rows[cells[0].strip("`").split(".")[1]] = set(re.findall(r"`lamina(?:\.(\w+))?`", cells[2]))
    for engine, allowed in ENGINE_IMPORTS.items():
        assert engine in rows, f"README.md's table has no row of its own for lamina.{engine}"
        stated = {name or "lamina" for name in rows[engine]}
        assert stated == allowed, f"README.md, lamina.{engine}: states {sorted(stated)}, the allow-list is {sorted(allowed)}"
