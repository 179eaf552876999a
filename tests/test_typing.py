"""mypy is clean on trainsim.operators, trainsim.topology and trainsim.sim (settings: pyproject.toml).

The repository keeps the subpackages in top-level folders that only become ``trainsim.*`` at
install or import time, so the check runs on a temporary ``trainsim/`` package made of
symlinks to those folders and a copy of ``trainsim/__init__.py``.
"""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("operators", "topology", "sim")


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_clean(tmp_path):
    pkg = tmp_path / "trainsim"
    pkg.mkdir()
    shutil.copy(ROOT / "trainsim" / "__init__.py", pkg / "__init__.py")
    for name in PACKAGES:
        (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--cache-dir", str(tmp_path / ".mypy_cache")]
    for name in PACKAGES:
        cmd += ["-p", f"trainsim.{name}"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
