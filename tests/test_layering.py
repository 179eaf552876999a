"""The dependency rules of docs/architecture.md, and ruff, checked on every test run."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
HEAVY = {"simpy": {"sim"}, "torch": {"calibration"}, "sklearn": {"calibration"}, "xgboost": {"calibration"}}
# which of our own packages each package may import (dependencies point one way)
ALLOWED_OWN = {
    "operators": {"operators"},
    "topology": {"topology", "operators"},
    "calibration": {"calibration", "operators"},
    "sim": {"sim", "operators", "topology"},
    "scenarios": {"scenarios", "operators", "topology", "calibration", "sim"},
}


def imports(package: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        out[str(path.relative_to(ROOT))] = set(IMPORT.findall(path.read_text()))
    return out


@pytest.mark.parametrize("package", sorted(ALLOWED_OWN))
def test_layering(package):
    for path, mods in imports(package).items():
        for mod, homes in HEAVY.items():
            assert mod not in mods or package in homes, f"{path} imports {mod}"
        own = mods & set(ALLOWED_OWN)
        assert own <= ALLOWED_OWN[package], f"{path} imports {sorted(own - ALLOWED_OWN[package])}"


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    r = subprocess.run([ruff, "check", "--output-format", "concise", str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_package_import_stays_light():
    # `trainsim predict` must not pay for simpy, scikit-learn, xgboost or torch
    code = ("import sys, trainsim.scenarios.compose, trainsim.scenarios.cli; "
            "print(sorted(m for m in ('simpy', 'sklearn', 'xgboost', 'torch') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
