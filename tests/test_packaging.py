"""What users install: ``python -m build`` makes an sdist and a wheel (built from the sdist, so the
sdist holds everything the wheel needs), and the wheel installs into a clean virtual environment,
away from this checkout, where the command and a create/append/scan round trip work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import lamina

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

SMOKE = """
import sys, tempfile
import pyarrow as pa
import lamina
assert lamina.__file__.startswith(sys.prefix), lamina.__file__  # the installed copy, not a checkout
d = tempfile.mkdtemp()
t = lamina.create_table(d + "/t", pa.schema([("id", pa.int64()), ("s", pa.string())]))
t.append(pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"]}))
got = lamina.open_table(d + "/t").scan(where="id >= 2", columns=["s"]).to_arrow()
print(sorted(got.column("s").to_pylist()))
"""


def run(*args: str, cwd: Path, env: dict | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_and_sdist_install_into_a_clean_venv_and_run(tmp_path):
    dist = tmp_path / "dist"
    try:
        import build  # noqa: F401  (the `test` extra pins it)
    except ImportError:
        pytest.skip("the `build` package is not installed (pip install -e '.[test]' installs it)")
    run(sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT), cwd=tmp_path)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(dist)
    assert re.fullmatch(rf"lamina-{re.escape(lamina.__version__)}-py3-none-any\.whl", wheels[0].name), wheels[0].name

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # A clean environment: nothing of this checkout or of the test venv on the path.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    run(str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheels[0]), cwd=tmp_path, env=env)

    assert run(str(bin_dir / "lamina"), "--version", cwd=tmp_path, env=env).strip() == f"lamina {lamina.__version__}"
    assert "Inspect and maintain Lamina tables" in run(str(bin_dir / "lamina"), "--help", cwd=tmp_path, env=env)
    assert run(str(bin_dir / "python"), "-c", SMOKE, cwd=tmp_path, env=env).strip() == "['b', 'c']"
