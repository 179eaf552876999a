"""Load a ``validation/<name>.py`` script as a module, for the tests of the device scripts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

VALIDATION = Path(__file__).resolve().parents[1] / "validation"


def load_script(name: str) -> ModuleType:
    """``validation/<name>.py``, registered in ``sys.modules`` under ``name`` (the first load wins:
    a script the others import, e.g. train_hf_parallel, is then the same module object)."""
    spec = importlib.util.spec_from_file_location(name, VALIDATION / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return mod
