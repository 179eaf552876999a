"""The dependency rules of docs/architecture.md, and ruff, checked on every test run."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"simpy": {"sim"}, "torch": {"calibration"}, "sklearn": {"calibration"}, "xgboost": {"calibration"}}
# which of our own packages each package may import (dependencies point one way); "trainsim" is
# the API package (trainsim/), which may use every library package
ALLOWED_OWN = {
    "operators": {"operators"},
    "topology": {"topology", "operators"},
    "calibration": {"calibration", "operators", "topology"},  # the datasheet table prices efficiency models
    "sim": {"sim", "operators", "topology"},
    "scenarios": {"scenarios", "operators", "topology", "calibration", "sim", "trainsim"},
    "trainsim": {"scenarios", "operators", "topology", "calibration", "sim", "trainsim"},
}
#: the command-line layer: only it (and ``python -m trainsim``) may import it
CLI = ("trainsim.scenarios.cli", "trainsim.scenarios.commands")
CLI_FILES = ("scenarios/cli.py", "scenarios/commands/", "trainsim/__main__.py")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside functions, as dotted names."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def own_package(module: str) -> str | None:
    """``trainsim.sim.engine`` -> ``sim``; ``trainsim`` / ``trainsim.api`` -> ``trainsim``."""
    parts = module.split(".")
    if parts[0] != "trainsim":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED_OWN else "trainsim"


def imports(package: str) -> dict[str, set[str]]:
    return {str(p.relative_to(ROOT)): imported_modules(p) for p in (ROOT / package).rglob("*.py")}


@pytest.mark.parametrize("package", sorted(ALLOWED_OWN))
def test_layering(package):
    files = imports(package)
    assert files, f"no modules found in {package}/"
    for path, mods in files.items():
        tops = {m.split(".")[0] for m in mods}
        for mod, homes in HEAVY.items():
            assert mod not in tops or package in homes, f"{path} imports {mod}"
        own = {p for m in mods if (p := own_package(m)) is not None}
        assert own <= ALLOWED_OWN[package], f"{path} imports {sorted(own - ALLOWED_OWN[package])}"
        if not path.startswith(CLI_FILES):
            cli = sorted(m for m in mods if m.startswith(CLI))
            assert not cli, f"library module {path} imports the CLI layer: {cli}"
        # the old top-level names are gone: everything is imported through trainsim.*
        stale = tops & (set(ALLOWED_OWN) - {"trainsim"})
        assert not stale, f"{path} imports {sorted(stale)} outside the trainsim namespace"


def test_layering_rules_catch_violations(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from trainsim.scenarios.commands.run import run\n    import simpy\n")
    mods = imported_modules(bad)
    assert "trainsim.scenarios.commands.run" in mods and "simpy" in mods
    assert own_package("trainsim.sim.engine") == "sim" and own_package("trainsim") == "trainsim"


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
