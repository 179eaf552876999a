import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference-data" / "estimate-train-time"


def reference_dir() -> Path | None:
    p = Path(os.environ.get("TRAINSIM_REFERENCE_DATA", DEFAULT_REFERENCE))
    return p if (p / "Perlmutter").is_dir() else None


@pytest.fixture(scope="session")
def reference_data() -> Path:
    p = reference_dir()
    if p is None:
        pytest.skip("reference samples not found (set TRAINSIM_REFERENCE_DATA)")
    return p
